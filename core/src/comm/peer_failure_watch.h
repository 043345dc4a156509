// A rank blocked in a Gloo collective learns, through the group's store, that a peer has already
// failed it.
//
// Why: in a Gloo ring of 3 where rank 1 exits, rank 0 sees rank 1's pair close and fails, but
// rank 2 is blocked receiving from rank 0. Rank 0 stays alive for the failure-report exchange
// (failure_exchange.h) with its pairs open, so rank 2's collective failed only when rank 0's
// process exited, taking the store with it: rank 2 could then name no rank (about 1 run in 10–20
// of HealingLimits.ShardedOptimizerStateFailsInsteadOfRegrouping over Gloo). LibTorch 2.11's
// ProcessGroupGloo has no abort that would close rank 0's pairs. shm needs no watch (its segment
// shows a lost rank to every survivor), nor NCCL (its watchdog aborts the communicator).
//
// Protocol (keys under the communicator's store, so one group generation's):
//  1. a rank whose collective failed writes failure_cause/<rank> (its CollectiveFailure's name),
//     then adds 1 to failure_reports, before it posts its failure report (announce_failure,
//     called by failure_exchange.cpp);
//  2. while a host wait has run past kWatchAfter, the watch's thread reads failure_reports every
//     kPollEvery (an add of 0: one round trip to the store);
//  3. once it is above 0, the thread finds the lowest rank with a failure_cause key and records
//     it and its cause; the waits throw it (PendingCollective::wait_on_host) within a slice, and
//     this rank joins the exchange while the reporter still serves the store.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <optional>

#include "ddpd/common/collective_failure.h"

namespace ddpd::detail {

// Step 1: tells the watches of `store`'s group that `rank`'s collective failed with `cause`.
void announce_failure(c10d::Store& store, int rank, CollectiveFailure cause);

// A peer's announcement: who failed first, and why.
struct PeerFailure {
  int rank = -1;
  CollectiveFailure cause = CollectiveFailure::kBackend;
};

// Thread contract: begin_wait, end_wait and reported from any thread. One thread of its own,
// started by the first wait and detached; it holds only shared state (the store among it), so a
// store read blocked by a partition never holds the rank or its destructor.
class PeerFailureWatch {
 public:
  // Waits that last this long start the polls: a healthy step's waits mostly end sooner, and a
  // peer's failure is seen within kWatchAfter + kPollEvery + a round trip.
  static constexpr std::chrono::milliseconds kWatchAfter{100};
  static constexpr std::chrono::milliseconds kPollEvery{100};

  PeerFailureWatch(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size);
  ~PeerFailureWatch();
  PeerFailureWatch(const PeerFailureWatch&) = delete;
  PeerFailureWatch& operator=(const PeerFailureWatch&) = delete;

  // Around each host wait on a collective (they may nest across threads). Never throw: a thread
  // the system refuses leaves the waits unwatched, as shm's and NCCL's are.
  void begin_wait() noexcept;
  void end_wait() noexcept;
  // The first peer failure seen; it stays seen.
  std::optional<PeerFailure> reported() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace ddpd::detail
