#include "shm/rank_order_sum.h"

#include <algorithm>
#include <cstring>

namespace ddpd::shm {
namespace {

// Elements per block: 2,048 floats are 8 KiB, so the accumulator stays in a 32 KiB L1 while the
// terms stream through it.
constexpr int64_t kBlockElements = 2048;

template <typename T>
void sum_blocks(const std::vector<const void*>& terms, int64_t count, T* out, T* also_out) {
  alignas(64) T accumulator[kBlockElements];
  for (int64_t begin = 0; begin < count; begin += kBlockElements) {
    const int64_t n = std::min(kBlockElements, count - begin);
    const T* first = static_cast<const T*>(terms[0]) + begin;
    std::memcpy(accumulator, first, n * sizeof(T));
    for (size_t r = 1; r < terms.size(); ++r) {
      const T* __restrict term = static_cast<const T*>(terms[r]) + begin;
      for (int64_t i = 0; i < n; ++i) accumulator[i] += term[i];
    }
    std::memcpy(out + begin, accumulator, n * sizeof(T));
    if (also_out != nullptr) std::memcpy(also_out + begin, accumulator, n * sizeof(T));
  }
}

}  // namespace

bool sum_in_rank_order(const std::vector<const void*>& terms, int64_t count, c10::ScalarType dtype,
                       void* out, void* also_out) {
  if (terms.empty()) return false;
  switch (dtype) {
    case c10::ScalarType::Float:
      sum_blocks(terms, count, static_cast<float*>(out), static_cast<float*>(also_out));
      return true;
    case c10::ScalarType::Double:
      sum_blocks(terms, count, static_cast<double*>(out), static_cast<double*>(also_out));
      return true;
    default:
      return false;
  }
}

}  // namespace ddpd::shm
