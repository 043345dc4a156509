#include "p2p_waiter.h"

#include <c10/util/Exception.h>

#include "shm/shm_work.h"

namespace ddpd_torch {
namespace {

void complete(const c10::intrusive_ptr<c10d::Work>& work, std::exception_ptr error) {
  static_cast<ddpd::shm::ShmWork*>(work.get())->complete(std::move(error));
}

std::exception_ptr failure(const std::string& what, const std::string& why) {
  // A DistBackendError, as Gloo's own failures reach Python (a RuntimeError subclass).
  try {
    C10_THROW_ERROR(DistBackendError, "ddpd: " + what + " failed: " + why);
  } catch (...) {
    return std::current_exception();
  }
}

}  // namespace

c10::intrusive_ptr<c10d::Work> P2pWaiter::add(c10::intrusive_ptr<c10d::Work> gloo,
                                              std::vector<at::Tensor> outputs,
                                              std::function<void()> then, std::string what,
                                              int rank, c10d::OpType type) {
  auto work = c10::make_intrusive<ddpd::shm::ShmWork>(std::move(outputs), rank, type);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    TORCH_CHECK(!stopping_, "ddpd: this process group was shut down (destroy_process_group)");
    queue_.push_back({std::move(gloo), work, std::move(then), std::move(what)});
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  }
  wake_.notify_all();
  return work;
}

void P2pWaiter::loop() {
  for (;;) {
    Pending next;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      next = std::move(queue_.front());
      queue_.pop_front();
      waiting_on_ = next.gloo;
    }
    std::exception_ptr error;
    try {
      // Gloo's wait: the group's timeout, or the peer's closed connection; false when aborted.
      if (!next.gloo->wait()) {
        error = failure(next.what, "aborted: the process group was shut down");
      } else if (next.then) {
        next.then();
      }
    } catch (const std::exception& e) {
      error = failure(next.what, e.what());
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      waiting_on_.reset();
    }
    complete(next.work, error);
  }
}

void P2pWaiter::stop() {
  std::deque<Pending> left;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
    left.swap(queue_);
    if (waiting_on_) waiting_on_->abort();  // its wait() then throws, and the loop ends
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (Pending& pending : left) {
    pending.gloo->abort();
    complete(pending.work, failure(pending.what, "the process group was shut down"));
  }
}

}  // namespace ddpd_torch
