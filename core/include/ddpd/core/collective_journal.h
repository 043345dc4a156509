// The collective journal: every collective a communicator launches, in launch order, with a
// per-group sequence number and the times it was enqueued and completed (or failed). It is how
// a rank says where it is: the last sequence number it enqueued and completed, and the oldest
// collective still pending. Matching those across ranks names the rank that has not joined a
// collective (docs/protocols.md).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddpd/common/job_options.h"  // kDefaultJournalSize

namespace ddpd {

enum class CollectiveState { kEnqueued, kCompleted, kFailed };
const char* to_string(CollectiveState state);

struct JournalEntry {
  int64_t seq = 0;  // per process group, from 1, in launch order (the same on every rank)
  std::string op;   // all_reduce, broadcast, all_gather, reduce_scatter, barrier
  std::string tag;  // the caller's: bucket3, owner1, param5, loss, module_state, spread_max
  int64_t numel = 0;
  std::string dtype;  // float32, bfloat16, ...
  CollectiveState state = CollectiveState::kEnqueued;
  double enqueued_s = 0;  // the communicator's clock (Communicator::now())
  double ended_s = 0;     // completed or failed; 0 while enqueued
};

// Where a rank stands, from its journal.
struct JournalProgress {
  int64_t last_enqueued = 0;                   // highest sequence number launched (0: none yet)
  int64_t last_completed = 0;                  // highest sequence number completed
  std::optional<JournalEntry> oldest_pending;  // lowest sequence number not yet ended
};

// A ring buffer of the last `capacity` collectives.
//
// Thread contract: enqueue() runs on the thread launching the collective (under the
// communicator's launch lock, so sequence numbers follow launch order); complete() and fail() run
// on whichever thread sees the end (Gloo's completion threads, the waiting thread); entries() and
// progress() may be called from any thread (the worker daemon's heartbeat). One mutex guards the
// ring; each record is O(1).
class CollectiveJournal {
 public:
  static constexpr size_t kDefaultCapacity = kDefaultJournalSize;  // --journal-size

  explicit CollectiveJournal(size_t capacity = kDefaultCapacity);

  // Records a launch; returns its sequence number.
  int64_t enqueue(std::string op, std::string tag, int64_t numel, std::string dtype, double now_s);
  // Record the end of collective `seq`; ignored once it has left the ring or has already ended.
  void complete(int64_t seq, double now_s);
  void fail(int64_t seq, double now_s);

  // The collectives still in the ring, oldest first.
  std::vector<JournalEntry> entries() const;
  JournalProgress progress() const;
  size_t capacity() const { return ring_.size(); }

 private:
  void end(int64_t seq, CollectiveState state, double now_s);

  mutable std::mutex mutex_;
  std::vector<JournalEntry> ring_;  // slot (seq - 1) % capacity
  int64_t last_enqueued_ = 0;
  int64_t last_completed_ = 0;
};

// The journal as JSON: {"capacity", "last_enqueued", "last_completed", "entries": [{"seq",
// "op", "tag", "numel", "dtype", "state", "enqueued_s", "ended_s"}]} (docs/metrics.md).
nlohmann::json journal_json(const CollectiveJournal& journal);

}  // namespace ddpd
