// The clock the job lifecycle reads: steady time for timeouts and stall watch, unix time for the
// timestamps in job histories. An interface so that JobManager's unit tests drive time by hand
// (a worker timeout of 15 s is tested in microseconds, with no sleep).
#pragma once

#include <chrono>

#include "ddpd/common/unix_time.h"

namespace ddpd::coordinator {

class LifecycleClock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  virtual ~LifecycleClock() = default;
  virtual TimePoint steady_now() const = 0;
  virtual double unix_seconds() const = 0;
};

// A span of the lifecycle's steady time, in seconds (for messages and limits).
inline double to_seconds(LifecycleClock::TimePoint::duration d) {
  return std::chrono::duration<double>(d).count();
}

class SystemClock final : public LifecycleClock {
 public:
  TimePoint steady_now() const override { return std::chrono::steady_clock::now(); }
  double unix_seconds() const override { return unix_now(); }
};

}  // namespace ddpd::coordinator
