#include "ddpd/common/shard_owners.h"

#include <algorithm>
#include <numeric>

namespace ddpd {

std::vector<int> assign_shard_owners(const std::vector<int64_t>& bytes,
                                     std::vector<int64_t>& owned_bytes) {
  std::vector<size_t> order(bytes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return bytes[a] > bytes[b]; });
  std::vector<int> owners(bytes.size(), 0);
  for (size_t k : order) {
    const auto least = std::min_element(owned_bytes.begin(), owned_bytes.end());
    *least += bytes[k];
    owners[k] = static_cast<int>(least - owned_bytes.begin());
  }
  return owners;
}

}  // namespace ddpd
