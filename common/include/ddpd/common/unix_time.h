// The wall clock as unix seconds: what ranks, workers, the coordinator and the tests stamp
// events with, so that processes on one host (and hosts with synchronised clocks) share one
// timeline. Intervals are measured on steady clocks; this is for timestamps only.
#pragma once

#include <chrono>

namespace ddpd {

inline double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace ddpd
