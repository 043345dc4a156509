// Time-interval arithmetic shared by the trainer (comm time per step) and ddpctl (timelines).
// Plain C++: part of ddpd_common, which every layer links (no LibTorch).
#pragma once

#include <vector>

namespace ddpd {

struct Interval {
  double begin = 0;
  double end = 0;
};

// Length of the union of `intervals` clipped to `window` (overlapping intervals count once).
double covered_seconds(std::vector<Interval> intervals, Interval window);

}  // namespace ddpd
