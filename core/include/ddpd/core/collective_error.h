// Why a collective failed, as data. The cause and the rank it names travel from the transport to
// the trainer and the worker's result as an enum and a number; the message is for people, and
// nothing reads it to learn the cause (rewording one changes no diagnosis).
//
// Where each cause comes from:
//  - the shared-memory transport (shm/): a TransportFailure with the cause and the peer;
//  - Communicator: kTimedOut when its own wait runs out, kAborted once abort() was called;
//  - Gloo: the one backend that speaks only text (ProcessGroupGloo rethrows gloo's IoException,
//    whose header the wheel does not ship); gloo_failure_cause() (comm/gloo_backend.h) reads its
//    words at that boundary, and nowhere else;
//  - --check-collectives: CollectiveDesync (kDesync).
#pragma once

#include <chrono>
#include <stdexcept>
#include <string>

#include "ddpd/common/collective_failure.h"

namespace ddpd {

// What a transport this project owns throws from a collective (shm/shm_process_group.h): the
// cause and the peer it names, beside the words for people.
class TransportFailure : public std::runtime_error {
 public:
  TransportFailure(CollectiveFailure cause, int peer_rank, const std::string& message)
      : std::runtime_error(message), cause_(cause), peer_rank_(peer_rank) {}
  CollectiveFailure cause() const { return cause_; }
  int peer_rank() const { return peer_rank_; }  // -1: none named

 private:
  CollectiveFailure cause_;
  int peer_rank_;
};

// The error message of a failed collective, from its cause: "collective NAME timed out after N
// ms: a rank did not join it in time [words]", "collective NAME failed: a peer rank closed its
// connection (its rank ended: …) [words]", "collective NAME abandoned: the job was cancelled …",
// or "collective NAME failed: words". `backend_words`: the backend's message, put on one line.
std::string describe_collective_failure(const std::string& collective, CollectiveFailure cause,
                                        std::chrono::milliseconds timeout,
                                        const std::string& backend_words);

// A collective that failed or timed out, or a desync --check-collectives found. The trainer
// catches it to run the cross-rank analysis, and the worker reports cause() and peer_rank().
class CollectiveError : public std::runtime_error {
 public:
  CollectiveError(const std::string& message, CollectiveFailure cause, int peer_rank = -1)
      : std::runtime_error(message), cause_(cause), peer_rank_(peer_rank) {}
  CollectiveFailure cause() const { return cause_; }
  // The rank the failure names: the peer the transport saw leave, or after the trainer's
  // cross-rank analysis the rank it found holding the collective; -1: none.
  int peer_rank() const { return peer_rank_; }

 private:
  CollectiveFailure cause_;
  int peer_rank_;
};

// --check-collectives found ranks launching different collectives under one sequence number;
// the message names both sides, so no further analysis is needed.
class CollectiveDesync : public CollectiveError {
 public:
  // `finding`: "rank 1 launched … as #7 where ranks 0, 2 launched … as #7".
  CollectiveDesync(const std::string& finding, int named_rank)
      : CollectiveError("collective desync (--check-collectives): " + finding,
                        CollectiveFailure::kDesync, named_rank),
        finding_(finding) {}
  const std::string& finding() const { return finding_; }
  int named_rank() const { return peer_rank(); }  // the lowest rank outside the majority

 private:
  std::string finding_;
};

}  // namespace ddpd
