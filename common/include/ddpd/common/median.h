// The median of a sample: the middle value, or the mean of the two middle values of an even
// count; 0 for an empty sample. Selection (nth_element), not a sort: linear in the count.
#pragma once

#include <algorithm>
#include <vector>

namespace ddpd {

inline double median(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t n = values.size();
  std::nth_element(values.begin(), values.begin() + n / 2, values.end());
  const double upper = values[n / 2];
  if (n % 2) return upper;
  return 0.5 * (upper + *std::max_element(values.begin(), values.begin() + n / 2));
}

}  // namespace ddpd
