// When a worker daemon tries to register again after its session ended.
#pragma once

#include <algorithm>
#include <cmath>

namespace ddpd {

// Seconds before registration try `attempt` (0: the first after the session ended): capped
// exponential backoff with jitter. The base doubles from `first` up to `cap`, and the wait is a
// uniform draw from its upper half (`uniform` in [0, 1)), so a cluster's daemons, cut off
// together, spread their tries instead of arriving at the coordinator at once, while each
// still tries within `first` the first time and waits at most `cap` between tries.
inline double reconnect_delay_seconds(int attempt, double uniform, double first, double cap) {
  const double base = std::min(cap, first * std::pow(2.0, std::min(attempt, 30)));
  return base * (0.5 + 0.5 * std::clamp(uniform, 0.0, 1.0));
}

}  // namespace ddpd
