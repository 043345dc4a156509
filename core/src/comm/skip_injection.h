// --inject skip-collective (docs/diagnosis.md) as a wrapper around the group
// (comm/decorating_backend.h): once armed, the next collective that reaches it is dropped. It
// never reaches the peers, and a completed Work stands for it, so this rank's later collectives
// pair with its peers' earlier ones: a desync. The journal shows the dropped collective as
// completed at once. The Communicator's constructor stacks it outermost when
// CommunicatorOptions::inject_skip_collective says so, and the fault injector
// (train/fault_injector.h) arms it at the step's start (arm_skip_collective).
#pragma once

#include <atomic>

#include "comm/decorating_backend.h"

namespace ddpd {

class Communicator;

namespace detail {

class SkipInjectingBackend final : public DecoratingBackend {
 public:
  explicit SkipInjectingBackend(c10::intrusive_ptr<c10d::Backend> inner);
  // The next collective that reaches this wrapper is dropped. Any thread.
  void arm() { armed_.store(true); }

 protected:
  c10::intrusive_ptr<c10d::Work> intercept(const LaunchedCollective& collective) override;

 private:
  std::atomic<bool> armed_{false};
};

// Arms `comm`'s skip: its next collective is dropped (at world size 1, where nothing is
// exchanged, nothing is). False when `comm` was made without inject_skip_collective.
bool arm_skip_collective(Communicator& comm);

}  // namespace detail
}  // namespace ddpd
