// An interval on the steady clock, in seconds: how every duration in the project is measured
// (timestamps that cross processes use unix_time.h instead).
#pragma once

#include <chrono>

namespace ddpd {

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace ddpd
