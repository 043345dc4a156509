// What a worker daemon must not lose between its rank and the coordinator's store: the rank's
// step reports and its result, kept from the moment the rank sends them until the coordinator
// acknowledges them as stored, across sessions.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>

#include "ddpd/v1/ddpd.pb.h"

namespace ddpd {

// Protocol (acknowledgement; docs/protocols.md, "Worker session"):
//  1. push() gives each message the daemon's next sequence number (from 1) and keeps it.
//  2. A session sends every kept message in order (next_to_send): first the ones an earlier
//     session sent without seeing them acknowledged, then each new one as it comes.
//  3. The coordinator answers `acknowledged = N` once every message up to N is committed to its
//     store; acknowledge(N) forgets them.
//  4. A new session starts again from the oldest kept message (rewind). The coordinator stores
//     each (job, attempt, rank, step) and each (job, attempt, rank) result once, so a message
//     that reached it before the session broke is not stored twice.
// Bound: at most max_bytes of serialized messages. A step report that would pass it is dropped
// and counted; the count rides on every later message (reports_dropped), so the coordinator
// records the loss. A result is always kept: a rank sends one.
//
// Thread contract: every method from any thread, under one mutex; next_to_send blocks its caller
// (the session's sender) until a message is due, interrupt() or its timeout.
class ReportLog {
 public:
  explicit ReportLog(int64_t max_bytes);

  // Keeps `message` (a step or a result) under the next sequence number; returns that number, or
  // 0 when the step was dropped for the bound.
  uint64_t push(v1::WorkerMessage message);
  // Forgets every message with a sequence number ≤ seq.
  void acknowledge(uint64_t seq);
  // A new session: everything kept is due again, oldest first.
  void rewind();
  // The next message this session has not sent, waiting up to `timeout` for one; nullopt on
  // timeout or after interrupt().
  std::optional<v1::WorkerMessage> next_to_send(std::chrono::duration<double> timeout);
  // Wakes next_to_send's waiter for good (the session ends); rewind() re-arms it.
  void interrupt();

  int64_t dropped() const;
  int64_t kept_bytes() const;
  size_t kept() const;
  uint64_t acknowledged() const;

 private:
  const int64_t max_bytes_;
  mutable std::mutex mutex_;
  std::condition_variable due_;
  struct Kept {
    v1::WorkerMessage message;
    int64_t bytes;
  };
  std::deque<Kept> kept_;  // oldest first, ascending seq
  int64_t kept_bytes_ = 0;
  uint64_t next_seq_ = 1;
  uint64_t sent_through_ = 0;  // this session has sent every kept message up to this seq
  uint64_t acknowledged_ = 0;
  int64_t dropped_ = 0;
  bool interrupted_ = false;
};

}  // namespace ddpd
