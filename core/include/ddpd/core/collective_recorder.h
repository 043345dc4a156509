// What a communicator's collectives leave behind, for the trainer, the metrics and the
// diagnosis: the journal (every collective in launch order, with its state), the traffic by op,
// and the spans (launch to completion on the communicator's clock). Communicator's launch path
// notifies it, as c10d's flight recorder is fed; nothing here launches a collective.
#pragma once

#include <ATen/ATen.h>

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ddpd/common/job_options.h"
#include "ddpd/core/collective_journal.h"

namespace ddpd {

namespace detail {
class Timeline;
struct TimePoint;
}  // namespace detail

// One collective from launch to completion, in seconds on the communicator's clock.
struct CommSpan {
  std::string name;
  Collective op = Collective::kAllReduce;
  double launch_s = 0;
  double complete_s = 0;
  int64_t bytes = 0;
};

// Collectives of one op launched by a communicator, and the bytes of their payloads (what this
// rank handed the backend: a gradient all-reduce in fp16 counts half the fp32 one).
struct TrafficCount {
  int64_t calls = 0;
  int64_t bytes = 0;
};

// Thread contract: on_launch runs on the launching thread under the communicator's launch mutex
// (sequence numbers follow launch order); on_work's completion callbacks run on the backend's
// threads (CPU); every reader (journal, traffic, take_spans, now) may run on any thread.
class CollectiveRecorder {
 public:
  CollectiveRecorder(at::Device device, size_t journal_size);
  ~CollectiveRecorder();

  // Seconds since the recorder was made (the clock of CommSpan and the journal).
  double now() const;
  // A time on that clock as unix seconds (the wall clock read once at creation), so spans of
  // ranks on different hosts line up on one timeline (to within their clocks' offset).
  double unix_seconds(double clock_s) const;
  // The clock of the device's work queue (host clock on CPU, CUDA events on CUDA), on the same
  // axis as now(). Shared by the trainer and the benchmarks.
  detail::Timeline& timeline() { return *timeline_; }

  // Every collective launched, with its sequence number and state.
  const CollectiveJournal& journal() const { return *journal_; }
  // Collectives launched so far and their payload bytes, by op (all_reduce, broadcast,
  // all_gather, reduce_scatter).
  std::map<std::string, TrafficCount> traffic() const;
  // Spans completed since the last call, oldest first.
  std::vector<CommSpan> take_spans();

  // The communicator's side. A launch: counted and journaled; returns its sequence number.
  int64_t on_launch(const std::string& op, const std::string& name, const at::Tensor& data);
  // A launched collective's work: its span ends when the work does (on CUDA, when the device
  // passes its completion event), and its journal entry completes or fails with it.
  void on_work(c10d::Work& work, Collective op, const std::string& name, int64_t seq, int64_t bytes,
               const detail::TimePoint& launch);
  // The journal a PendingCollective shares, to mark its entry failed.
  const std::shared_ptr<CollectiveJournal>& shared_journal() const { return journal_; }
  std::chrono::steady_clock::time_point epoch() const { return epoch_; }

 private:
  struct SpanLog;
  at::Device device_;
  std::chrono::steady_clock::time_point epoch_;
  double unix_epoch_s_;  // system clock at epoch_
  std::unique_ptr<detail::Timeline> timeline_;
  std::shared_ptr<SpanLog> spans_;  // shared with completion callbacks that may outlive a call
  std::shared_ptr<CollectiveJournal> journal_;  // shared with completion callbacks
  mutable std::mutex traffic_mutex_;
  std::map<std::string, TrafficCount> traffic_;  // by op; guarded by traffic_mutex_
};

}  // namespace ddpd
