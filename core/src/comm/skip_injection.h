// --inject skip-collective (docs/diagnosis.md) as a wrapper around the group
// (comm/decorating_backend.h): once armed, the next collective that reaches it is dropped. It
// never reaches the peers, and a completed Work stands for it, so this rank's later collectives
// pair with its peers' earlier ones: a desync. The journal shows the dropped collective as
// completed at once. The fault injector (train/fault_injector.h) arms it at the step's start,
// through the switch it shares with CommunicatorOptions::skip_next_collective.
#pragma once

#include <atomic>
#include <memory>

#include "comm/decorating_backend.h"

namespace ddpd::detail {

class SkipInjectingBackend final : public DecoratingBackend {
 public:
  SkipInjectingBackend(c10::intrusive_ptr<c10d::Backend> inner,
                       std::shared_ptr<std::atomic<bool>> armed);

 protected:
  c10::intrusive_ptr<c10d::Work> intercept(const LaunchedCollective& collective) override;

 private:
  std::shared_ptr<std::atomic<bool>> armed_;
};

}  // namespace ddpd::detail
