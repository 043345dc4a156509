#pragma once
// Completes the Works of point-to-point transfers that run on the Gloo companion group. Gloo's
// send and recv Works have no future (getFuture throws) and complete only through a blocking
// wait(), so one thread waits for them in launch order and completes a Work with a future in
// their stead (shm/shm_work.h): `async_op=True` and `get_future().then()` work as for the
// collectives.
//
// Waiting in launch order cannot deadlock: Gloo posts each send and recv when it is launched,
// and each completes on its own (the peer's matching call, or the group's timeout); the thread
// only observes them. A Gloo wait fails at the group's timeout (init_process_group's) or when the
// peer's connection closes (a dead peer); the error names the transfer and the peer.
//
// Thread contract: add() from any thread; one waiter thread, started by the first add(), which
// also runs the completed futures' callbacks. stop() (and the destructor) aborts what is pending,
// fails the Works still queued, and joins the thread.

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace ddpd_torch {

class P2pWaiter {
 public:
  P2pWaiter() = default;
  P2pWaiter(const P2pWaiter&) = delete;
  P2pWaiter& operator=(const P2pWaiter&) = delete;
  ~P2pWaiter() { stop(); }

  // A Work with a future that completes when `gloo` has, after `then` (a copy out of a staged
  // tensor, say). `what`: the transfer, for the error ("recv from rank 1").
  c10::intrusive_ptr<c10d::Work> add(c10::intrusive_ptr<c10d::Work> gloo,
                                     std::vector<at::Tensor> outputs, std::function<void()> then,
                                     std::string what, int rank, c10d::OpType type);
  void stop();

 private:
  struct Pending {
    c10::intrusive_ptr<c10d::Work> gloo;
    c10::intrusive_ptr<c10d::Work> work;  // a shm::ShmWork
    std::function<void()> then;
    std::string what;
  };
  void loop();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Pending> queue_;                  // guarded by mutex_
  c10::intrusive_ptr<c10d::Work> waiting_on_;  // guarded by mutex_: the Gloo work being waited
  bool stopping_ = false;                      // guarded by mutex_
  std::thread thread_;                         // started under mutex_
};

}  // namespace ddpd_torch
