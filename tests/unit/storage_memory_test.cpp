// make_resident (device/storage_memory.h): a joining rank faults in the memory a heal's state
// lands in before it lands (docs/healing.md). Residency is read back from the kernel (mincore).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

#include "device/storage_memory.h"

namespace ddpd {
namespace {

// The fraction of the pages under `tensor`'s bytes that are resident.
double resident_fraction(const torch::Tensor& tensor) {
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(tensor.data_ptr()) & ~(page - 1);
  const auto end = reinterpret_cast<uintptr_t>(tensor.data_ptr()) + tensor.nbytes();
  std::vector<unsigned char> pages((end - begin + page - 1) / page);
  if (::mincore(reinterpret_cast<void*>(begin), end - begin, pages.data()) != 0) return -1;
  int64_t resident = 0;
  for (unsigned char p : pages) resident += p & 1;
  return static_cast<double>(resident) / static_cast<double>(pages.size());
}

TEST(MakeResident, FaultsInEveryPageOfAFreshAllocation) {
  // 64 MiB: above glibc's largest mmap threshold (32 MiB), so fresh pages the kernel maps only
  // when first touched.
  const torch::Tensor fresh = torch::empty({16 << 20});
  ASSERT_LT(resident_fraction(fresh), 0.01) << "the allocation was already touched";
  detail::make_resident(fresh);
  EXPECT_EQ(resident_fraction(fresh), 1.0);
}

// Every byte stays, the partial pages at either end included (a slice that starts and ends
// inside a page).
TEST(MakeResident, KeepsEveryByte) {
  const torch::Tensor values = torch::arange(3 << 20, torch::kFloat);
  const torch::Tensor inside = values.narrow(0, 3, (3 << 20) - 7);
  const torch::Tensor before = inside.clone();
  detail::make_resident(inside);
  EXPECT_TRUE(torch::equal(inside, before));
  EXPECT_EQ(resident_fraction(inside), 1.0);
}

TEST(MakeResident, LeavesAnEmptyTensorAlone) {
  detail::make_resident(torch::empty({0}));
  detail::make_resident(detail::unallocated_tensor({4}, torch::kFloat));
}

}  // namespace
}  // namespace ddpd
