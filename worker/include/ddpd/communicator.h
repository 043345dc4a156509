// Collectives over a c10d process group, each with a timeout and a recorded time span.
#pragma once

#include <ATen/ATen.h>

#include "ddpd/c10d_compat.h"
#include "ddpd/collective_journal.h"

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ddpd {

namespace detail {
class Timeline;
struct TimePoint;
}  // namespace detail

// One collective from launch to completion, in seconds on the communicator's clock.
struct CommSpan {
  std::string name;
  double launch_s = 0;
  double complete_s = 0;
  int64_t bytes = 0;
};

// The error message of a failed collective, naming its cause: "timed out after N ms: a rank
// did not join it in time", "failed: a peer rank closed its connection (its process exited)",
// or the backend's own words. Exposed for tests.
std::string describe_collective_failure(const std::string& collective,
                                        std::chrono::milliseconds timeout,
                                        const std::string& backend_message);

// An asynchronous collective. On CPU (Gloo), wait() blocks until it completes or the
// communicator's timeout passes, and throws std::runtime_error (with the collective's name) on
// timeout or failure. On CUDA (NCCL), wait() makes the caller's current stream wait for the
// collective without blocking the host (a timeout there would turn newer PyTorch's wait into a
// host-side poll); NCCL's watchdog enforces the timeout given to the process group. The
// tensors passed in `keep_alive` stay referenced until wait(), so their memory is not reused
// by the caller's stream before the collective is done with it.
// A collective's entry in its communicator's journal, marked failed when wait() throws.
struct JournalTicket {
  std::shared_ptr<CollectiveJournal> journal;  // null: not journalled
  int64_t seq = 0;
  std::chrono::steady_clock::time_point epoch;  // the communicator's clock
};

class PendingCollective {
 public:
  PendingCollective() = default;
  PendingCollective(c10::intrusive_ptr<c10d::Work> work, std::string name,
                    std::chrono::milliseconds timeout, bool on_device = false,
                    std::vector<at::Tensor> keep_alive = {}, JournalTicket ticket = {});
  ~PendingCollective();
  PendingCollective(PendingCollective&&) noexcept;
  PendingCollective& operator=(PendingCollective&&) noexcept;

  void wait();

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::string name_;
  std::chrono::milliseconds timeout_{0};
  bool on_device_ = false;
  std::vector<at::Tensor> keep_alive_;
  JournalTicket ticket_;
};

// Thread contract: collectives may be launched from the training thread and from autograd
// hooks (on CUDA, autograd's device thread); launches are serialised by an internal mutex, and
// every rank must launch the same collectives in the same order (c10d matches them by order).
// Span recording is thread-safe (on CPU, completion is recorded on the backend's threads; on
// CUDA, by events read back in take_spans). With world_size 1 and no process group, every
// collective is the identity and completes at once.
class Communicator {
 public:
  // `device` holds the tensors the collectives take: CPU for Gloo, the rank's GPU for NCCL.
  // The journal keeps the last `journal_size` collectives.
  Communicator(c10::intrusive_ptr<compat::CollectiveBackend> group, int rank, int world_size,
               std::chrono::milliseconds timeout, at::Device device = at::kCPU,
               size_t journal_size = CollectiveJournal::kDefaultCapacity);
  ~Communicator();

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  at::Device device() const { return device_; }
  // The clock of the device's work queue (host clock on CPU, CUDA events on CUDA), on the
  // same axis as now(). Shared by the trainer and the benchmarks.
  detail::Timeline& timeline() { return *timeline_; }

  // In-place sum across ranks.
  PendingCollective all_reduce_sum(at::Tensor& tensor, const std::string& name);
  // In-place element-wise max / min (used for the param spread).
  void all_reduce_max(at::Tensor& tensor);
  void all_reduce_min(at::Tensor& tensor);
  // Rank `root`'s tensor is copied into every rank's.
  PendingCollective broadcast(at::Tensor& tensor, int root, const std::string& name);
  // output (world_size * input.numel(), contiguous 1-D) gets every rank's input in rank order.
  PendingCollective all_gather(at::Tensor& output, const at::Tensor& input,
                               const std::string& name);
  // input is 1-D with world_size * output.numel() elements; output gets the sum over ranks of
  // this rank's chunk. Blocking. NCCL runs its reduce-scatter; Gloo in LibTorch 1.13 lacks one,
  // so there it runs as a ring of send/recv (bandwidth-optimal: each rank sends (N-1)/N of the
  // input).
  void reduce_scatter_sum(at::Tensor& output, const at::Tensor& input, const std::string& name);
  void barrier();

  // Every collective launched, with its sequence number and state (thread-safe to read).
  const CollectiveJournal& journal() const { return *journal_; }

  // Spans completed since the last call, oldest first.
  std::vector<CommSpan> take_spans();
  // Seconds since this communicator was created (the clock of CommSpan).
  double now() const;
  // A time on that clock as unix seconds (the wall clock read once at creation), so spans of
  // ranks on different hosts line up on one timeline (to within their clocks' offset).
  double unix_seconds(double clock_s) const;

 private:
  // A blocking all-reduce with `op` (the param spread's max and min).
  void blocking_all_reduce(at::Tensor& tensor, c10d::ReduceOp op, const std::string& name);
  // Journals a launch (call with launch_mutex_ held, so sequence numbers follow launch order).
  int64_t journal_launch(const std::string& op, const std::string& name, const at::Tensor& data);
  JournalTicket ticket(int64_t seq) const { return {journal_, seq, epoch_}; }
  PendingCollective track(c10::intrusive_ptr<c10d::Work> work, const std::string& name, int64_t seq,
                          int64_t bytes, const detail::TimePoint& launch,
                          std::vector<at::Tensor> keep_alive = {});

  c10::intrusive_ptr<compat::CollectiveBackend> group_;
  int rank_;
  int world_size_;
  std::chrono::milliseconds timeout_;
  at::Device device_;
  std::chrono::steady_clock::time_point epoch_;
  double unix_epoch_s_;  // system clock at epoch_
  std::mutex launch_mutex_;
  std::unique_ptr<detail::Timeline> timeline_;
  struct SpanLog;
  std::shared_ptr<SpanLog> spans_;  // shared with completion callbacks that may outlive a call
  std::shared_ptr<CollectiveJournal> journal_;  // shared with completion callbacks
};

}  // namespace ddpd
