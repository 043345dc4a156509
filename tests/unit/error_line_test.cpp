// A rank's failure as one line: NCCL's cause kept, out-of-memory marked, no backtrace.
#include <gtest/gtest.h>

#include "train/error_line.h"

namespace ddpd::detail {
namespace {

// ProcessGroupNCCL's message for two ranks on one GPU (LibTorch 2.11, NCCL 2.28): the cause is
// on the line after "Last error:".
TEST(ErrorLine, KeepsNcclsLastError) {
  const std::string nccl =
      "NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3812, invalid "
      "usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.28.9\n"
      "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\n"
      "Last error:\n"
      "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 53000\n";
  EXPECT_EQ(error_line(nccl),
            "NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3812, "
            "invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.28.9 (last "
            "error: Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 53000)");
}

TEST(ErrorLine, FirstLineOnlyWithoutNcclsCause) {
  EXPECT_EQ(error_line("shape mismatch\nException raised from foo at bar.cpp:1"), "shape mismatch");
  EXPECT_EQ(error_line("Last error:\n\n"), "Last error:");  // nothing after the marker
}

TEST(ErrorLine, MarksAnAllocationFailure) {
  EXPECT_EQ(error_line("CUDA out of memory. Tried to allocate 2.00 GiB\nmore"),
            "out of memory: CUDA out of memory. Tried to allocate 2.00 GiB");
  EXPECT_EQ(error_line("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8"),
            "out of memory: DefaultCPUAllocator: can't allocate memory: you tried to allocate 8");
}

}  // namespace
}  // namespace ddpd::detail
