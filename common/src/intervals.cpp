#include "ddpd/common/intervals.h"

#include <algorithm>

namespace ddpd {

double covered_seconds(std::vector<Interval> intervals, Interval window) {
  std::sort(intervals.begin(), intervals.end(),
            [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
  double total = 0, cursor = window.begin;
  for (const auto& s : intervals) {
    const double lo = std::max(s.begin, cursor), hi = std::min(s.end, window.end);
    if (hi > lo) {
      total += hi - lo;
      cursor = hi;
    }
  }
  return total;
}

}  // namespace ddpd
