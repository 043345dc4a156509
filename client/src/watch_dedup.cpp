#include "watch_dedup.h"

#include <cmath>

namespace ddpd::client {
namespace {

// Microseconds: the store keeps times as SQLite REALs, but a key should not hinge on the last bit.
std::string time_key(double unix_time) { return std::to_string(std::llround(unix_time * 1e6)); }

}  // namespace

std::string event_key(const v1::JobEvent& event) {
  if (event.has_transition()) {
    const auto& t = event.transition();
    return "t " + std::to_string(t.state()) + " " + time_key(t.unix_time()) + " " + t.reason();
  }
  if (event.has_incident()) {
    const auto& i = event.incident();
    return "i " + i.kind() + " " + time_key(i.unix_time()) + " " + std::to_string(i.rank()) + " " +
           i.message();
  }
  if (event.has_pending()) {
    return "p " + time_key(event.pending().unix_time()) + " " + event.pending().reason();
  }
  return "s " + std::to_string(event.step().step());
}

void WatchDedup::new_stream() { in_stream_.clear(); }

bool WatchDedup::admit(const v1::JobEvent& event) {
  const std::string key = event_key(event);
  const int nth = ++in_stream_[key];
  int& printed = printed_[key];
  if (nth <= printed) return false;
  printed = nth;
  if (event.has_pending()) {
    if (event.pending().reason() == last_pending_) return false;
    last_pending_ = event.pending().reason();
  }
  return true;
}

}  // namespace ddpd::client
