// Timeline of a CPU device: work runs when it is issued, so a point is the host clock's now.
#include <stdexcept>

#include "device/device.h"

namespace ddpd::detail {
namespace {

// Thread contract: stateless apart from the clock, which must be thread-safe.
class HostTimeline : public Timeline {
 public:
  explicit HostTimeline(std::function<double()> clock) : clock_(std::move(clock)) {}
  void anchor() override {}
  TimePoint mark() override { return {clock_(), -1}; }
  TimePoint mark_completion(c10d::Work&) override {
    throw std::logic_error("HostTimeline: CPU collectives are timed by their future");
  }
  double seconds(const TimePoint& point) override { return point.host_s; }
  void synchronize() override {}

 private:
  std::function<double()> clock_;
};

}  // namespace

std::unique_ptr<Timeline> make_host_timeline(std::function<double()> host_clock) {
  return std::make_unique<HostTimeline>(std::move(host_clock));
}

}  // namespace ddpd::detail
