// ddpctl watch across reconnects. WatchJob replays the job's whole event list on every call, and
// after a coordinator restart in another order (stored transitions and incidents first, then the
// steps), so what was already printed is recognised by content, not by position.
#pragma once

#include <map>
#include <string>

#include "ddpd/v1/ddpd.pb.h"

namespace ddpd::client {

// Thread contract: single-threaded (the watching thread).
class WatchDedup {
 public:
  // A new WatchJob stream begins (its replay starts again from the job's first event).
  void new_stream();
  // True when `event` was not let through already; it then counts as printed.
  bool admit(const v1::JobEvent& event);

 private:
  // Events are counted by key, not kept in a set: a job restarted from a checkpoint runs (and
  // reports) steps again, so the n-th step 10 of a stream is new only if fewer than n were
  // printed.
  std::map<std::string, int> printed_;
  std::map<std::string, int> in_stream_;
  // A pending reason is news only when it differs from the last one printed: a restarted
  // coordinator works out the same reason again, at another time.
  std::string last_pending_;
};

// What identifies an event across replays: a step by its number alone (a restarted coordinator
// aggregates stored steps again, and e.g. their compute scores may differ); a transition by its
// state, time and reason; an incident by its kind, time, rank and message; a pending reason by its
// time and text.
std::string event_key(const v1::JobEvent& event);

}  // namespace ddpd::client
