// A shift around the ring of ranks: each rank sends a tensor to its successor (rank + 1 mod N)
// and receives its predecessor's, as fsdp's --shard-replicas does with each reduced gradient
// shard (docs/healing.md). The Communicator has no point-to-point send (Gloo and NCCL do, shm
// does not), so each edge of the ring is a group of two (split_group,
// comm/communicator_split.h) whose broadcast from the sender is the send, over the job's own
// transport.
//
// Protocol:
//  1. Construction, a collective: every rank forms its two edges in ascending edge order (edge e
//     joins ranks e and e + 1 mod N, under "split/ring_edge/<e>/" of the group's store), so
//     that no rank waits for a peer that waits for a third (a cycle of N waits otherwise). At
//     world 2 the group itself is the one edge, and nothing is formed.
//  2. shift(): the broadcast to the successor, then the one from the predecessor, each on its
//     edge. The edges' executors are independent, so the order within a rank does not matter;
//     at world 2 both are on the one group, launched root 0 first on both ranks.
//  3. wait(): both complete; a failure names the job's rank (the edge's is 0 or 1).
// Every rank shifts the same tensors in the same order (c10d's contract on each edge).
//
// Thread contract: as the Communicator's; one thread shifts at a time.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ddpd/core/communicator.h"

namespace ddpd::detail {

// One shift in flight. wait() throws CollectiveError naming the job's rank.
class PendingShift {
 public:
  PendingShift() = default;  // complete
  PendingShift(PendingCollective first, int first_peer, PendingCollective second, int second_peer);
  void wait();

 private:
  PendingCollective first_;
  PendingCollective second_;
  int first_peer_ = -1;  // the job's rank at the other end of each edge
  int second_peer_ = -1;
};

class RingShift {
 public:
  // `comm` must have more than one rank and a store (split_group, comm/communicator_split.h).
  explicit RingShift(std::shared_ptr<Communicator> comm);

  // Launches: `send` to the successor, `receive` (the same shape) from the predecessor. Both
  // must stay alive until wait().
  PendingShift shift(at::Tensor& send, at::Tensor& receive, const std::string& name);

 private:
  std::shared_ptr<Communicator> comm_;       // world 2: the edge itself
  std::shared_ptr<Communicator> to_next_;    // world > 2: the edge to the successor
  std::shared_ptr<Communicator> from_prev_;  // world > 2: the edge from the predecessor
  int rank_ = 0;
  int successor_ = 0;
  int predecessor_ = 0;
};

}  // namespace ddpd::detail
