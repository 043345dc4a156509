// The group a Trainer trains in: a heal (heal/healer.h) swaps it for the next generation's.
//
// Thread contract: the training thread alone sets it and reads it through -> and *; any thread
// may get() it (Trainer::position(), while a heal may swap it).
#pragma once

#include <memory>
#include <mutex>

#include "ddpd/core/communicator.h"

namespace ddpd::detail {

class CurrentGroup {
 public:
  std::shared_ptr<Communicator> get() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return comm_;
  }
  // The old group's Communicator ends here, unless another holds it.
  void set(std::shared_ptr<Communicator> comm) {
    std::lock_guard<std::mutex> lock(mutex_);
    comm_ = std::move(comm);
  }
  Communicator* operator->() const { return comm_.get(); }
  Communicator& operator*() const { return *comm_; }

 private:
  std::shared_ptr<Communicator> comm_;
  mutable std::mutex mutex_;
};

}  // namespace ddpd::detail
