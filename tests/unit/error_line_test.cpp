// A rank's failure as one line: NCCL's cause kept, out-of-memory marked, no backtrace. The
// messages are the libraries' own: provoked here where a CPU can (the CPU allocator), copied
// from a run where it cannot (NCCL, CUDA).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "train/error_line.h"

namespace ddpd::detail {
namespace {

c10::Error error_with(const std::string& message) {
  return c10::Error(c10::SourceLocation{"wait", "Work.cpp", 1}, message);
}

// ProcessGroupNCCL's message for two ranks on one GPU (LibTorch 2.11, NCCL 2.28): the cause is
// on the line after "Last error:".
TEST(ErrorLine, KeepsNcclsLastError) {
  const std::string nccl =
      "NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3812, invalid "
      "usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.28.9\n"
      "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\n"
      "Last error:\n"
      "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 53000\n";
  EXPECT_EQ(error_line(error_with(nccl)),
            "NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3812, "
            "invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.28.9 (last "
            "error: Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 53000)");
}

TEST(ErrorLine, FirstLineOnlyWithoutNcclsCauseOrTheBacktrace) {
  const c10::Error shape = error_with("shape mismatch\nmore");
  EXPECT_NE(std::string(shape.what()).find("Exception raised from wait"), std::string::npos);
  EXPECT_EQ(error_line(shape), "shape mismatch");
  EXPECT_EQ(error_line(error_with("Last error:\n\n")), "Last error:");  // nothing after it
}

// The CPU allocator's failure, provoked: 1 PiB cannot be had on any machine this runs on.
TEST(ErrorLine, MarksTheCpuAllocatorsFailure) {
  try {
    (void)at::empty({int64_t{1} << 50}, at::kByte);
    FAIL() << "a 1 PiB allocation succeeded";
  } catch (const c10::Error& e) {
    EXPECT_TRUE(allocation_failed(e)) << e.msg();
    EXPECT_EQ(error_line(e).rfind("out of memory: ", 0), 0u) << error_line(e);
  }
  EXPECT_FALSE(allocation_failed(error_with("shape mismatch")));
}

// CUDA's caching allocator throws its own type; the words do not matter.
TEST(ErrorLine, MarksCudasOutOfMemoryErrorByItsType) {
  const c10::OutOfMemoryError oom(c10::SourceLocation{"malloc", "CUDACachingAllocator.cpp", 1},
                                  "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
                                  "total capacity of 79.19 GiB\nmore");
  EXPECT_TRUE(allocation_failed(oom));
  EXPECT_EQ(error_line(oom),
            "out of memory: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
            "capacity of 79.19 GiB");
}

}  // namespace
}  // namespace ddpd::detail
