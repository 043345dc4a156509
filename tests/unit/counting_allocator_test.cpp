// The counting CPU allocator (device/counting_allocator.h): exact live bytes and the peak since a
// reset, for tensors allocated on any thread.
#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

#include "device/counting_allocator.h"

namespace ddpd {
namespace {

TEST(CountingAllocator, CountsEachTensorsBytesUntilItIsFreedAndThePeakSinceAReset) {
  detail::install_counting_cpu_allocator();
  detail::install_counting_cpu_allocator();  // once per process: the second does nothing
  const int64_t before = detail::live_cpu_tensor_bytes();
  detail::reset_cpu_tensor_peak();
  EXPECT_EQ(detail::peak_cpu_tensor_bytes(), before);
  {
    const torch::Tensor a = torch::empty({1000}, torch::kFloat32);
    EXPECT_EQ(detail::live_cpu_tensor_bytes(), before + 4000);
    {
      const torch::Tensor b = torch::empty({10, 50}, torch::kFloat64);
      EXPECT_EQ(detail::live_cpu_tensor_bytes(), before + 8000);
    }
    EXPECT_EQ(detail::live_cpu_tensor_bytes(), before + 4000);
    EXPECT_EQ(detail::peak_cpu_tensor_bytes(), before + 8000);
    detail::reset_cpu_tensor_peak();
    EXPECT_EQ(detail::peak_cpu_tensor_bytes(), before + 4000);
    const torch::Tensor view = a.narrow(0, 0, 10);  // a view allocates nothing
    EXPECT_EQ(detail::live_cpu_tensor_bytes(), before + 4000);
  }
  EXPECT_EQ(detail::live_cpu_tensor_bytes(), before);
}

TEST(CountingAllocator, AllocationsFromManyThreadsBalance) {
  detail::install_counting_cpu_allocator();
  const int64_t before = detail::live_cpu_tensor_bytes();
  detail::reset_cpu_tensor_peak();
  constexpr int kThreads = 4, kTensors = 2000;
  std::vector<std::thread> threads;
  std::vector<torch::Tensor> kept(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &kept] {
      for (int i = 0; i < kTensors; ++i) torch::empty({256}, torch::kFloat32);
      kept[t] = torch::empty({1024}, torch::kFloat32);  // freed on the main thread
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(detail::live_cpu_tensor_bytes(), before + kThreads * 4096);
  // At least the four kept tensors at once; at most every thread's one temporary on top.
  EXPECT_GE(detail::peak_cpu_tensor_bytes(), before + kThreads * 4096);
  EXPECT_LE(detail::peak_cpu_tensor_bytes(), before + kThreads * (4096 + 1024));
  kept.clear();
  EXPECT_EQ(detail::live_cpu_tensor_bytes(), before);
}

// LibTorch code that allocates raw memory (oneDNN's bf16 matmuls) asserts a simple DataPtr
// (context == data) and calls raw_deallocate(): with a context object per allocation, a bf16
// step failed at step 0 (`dptr.get() == dptr.get_context()`).
TEST(CountingAllocator, GivesSimpleDataPtrsThatRawAllocationCanUse) {
  detail::install_counting_cpu_allocator();
  c10::Allocator* allocator = c10::GetCPUAllocator();
  const int64_t before = detail::live_cpu_tensor_bytes();
  {
    const c10::DataPtr data = allocator->allocate(1000);
    EXPECT_TRUE(allocator->is_simple_data_ptr(data));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(data.get()) % 64, 0u);
    EXPECT_EQ(detail::live_cpu_tensor_bytes(), before + 1000);
  }
  void* raw = allocator->raw_allocate(333);
  EXPECT_EQ(detail::live_cpu_tensor_bytes(), before + 333);
  allocator->raw_deallocate(raw);
  EXPECT_EQ(detail::live_cpu_tensor_bytes(), before);

  const auto a = torch::arange(64 * 48, torch::kFloat32).reshape({64, 48}).div(1000);
  const auto b = torch::arange(48 * 32, torch::kFloat32).reshape({48, 32}).div(1000);
  const auto product = torch::matmul(a.to(torch::kBFloat16), b.to(torch::kBFloat16));
  // bf16 keeps 8 significant bits: inputs rounded (2^-9 each), the positive sums accumulated in
  // fp32, the result rounded again (2^-9): within 2^-8 + 2^-9 relative, under the 1/64 asked.
  EXPECT_TRUE(torch::allclose(product.to(torch::kFloat32), torch::matmul(a, b), 1.0 / 64, 0));
}

// Not a pass/fail: what counting adds to one allocation and free, beside the allocator it wraps
// (the figure docs/metrics.md quotes).
TEST(CountingAllocator, PrintsItsCostPerAllocation) {
  detail::install_counting_cpu_allocator();
  constexpr int kRounds = 200000;
  auto time_ns = [](c10::Allocator* allocator) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kRounds; ++i) allocator->allocate(4096);
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start)
               .count() /
           kRounds;
  };
  const double inner = time_ns(c10::GetDefaultCPUAllocator());
  const double counting = time_ns(c10::GetCPUAllocator());
  std::printf("allocate+free of 4 KiB: %.1f ns wrapped, %.1f ns counted (+%.1f ns)\n", inner,
              counting, counting - inner);
}

}  // namespace
}  // namespace ddpd
