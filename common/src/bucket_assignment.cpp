#include "ddpd/common/bucket_assignment.h"

#include <stdexcept>

namespace ddpd {

std::vector<std::vector<size_t>> assign_buckets(const std::vector<size_t>& order,
                                                const std::vector<int64_t>& numels,
                                                int64_t element_size, int64_t cap_bytes,
                                                int64_t first_cap_bytes) {
  if (cap_bytes <= 0 || first_cap_bytes <= 0) {
    throw std::invalid_argument("bucket caps must be positive");
  }
  std::vector<std::vector<size_t>> buckets;
  int64_t filled = 0;
  for (size_t k : order) {
    const int64_t bytes = numels.at(k) * element_size;
    const int64_t cap = buckets.size() == 1 ? first_cap_bytes : cap_bytes;  // filling the first?
    if (buckets.empty() || (filled + bytes > cap && filled > 0)) {
      buckets.emplace_back();
      filled = 0;
    }
    buckets.back().push_back(k);
    filled += bytes;
  }
  return buckets;
}

std::vector<std::vector<size_t>> assign_buckets(const std::vector<int64_t>& numels,
                                                int64_t element_size, int64_t cap_bytes) {
  std::vector<size_t> reverse(numels.size());
  for (size_t k = 0; k < numels.size(); ++k) reverse[k] = numels.size() - 1 - k;
  return assign_buckets(reverse, numels, element_size, cap_bytes, cap_bytes);
}

}  // namespace ddpd
