// What the Communicator (ddpd/core/communicator.h) keeps from its users and shows only to core's
// own comm code: a collective's work and journal entry, how its group was formed (the rendezvous
// makes that), and its launch path, over which the collectives of one feature are free functions
// (comm/predecessor_keeping_reduce_scatter.h, comm/communicator_split.h).
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ddpd/core/communicator.h"

namespace ddpd::detail {

// A collective's entry in its communicator's journal, marked failed when wait() throws.
struct JournalTicket {
  std::shared_ptr<CollectiveJournal> journal;  // null: not journalled
  int64_t seq = 0;
  std::chrono::steady_clock::time_point epoch;       // the communicator's clock
  std::shared_ptr<const std::atomic<bool>> aborted;  // Communicator::abort(); null: never
  // A peer's announced failure ends the wait (comm/peer_failure_watch.h); null: not watched.
  std::shared_ptr<PeerFailureWatch> peer_failures;
  // A group of two's other rank: a peer that ended, which Gloo's words do not name, is it.
  // -1: more peers than one.
  int only_peer = -1;
};

// What a PendingCollective waits on. The tensors in `keep_alive` stay referenced until wait()
// succeeds.
struct CollectiveWork {
  c10::intrusive_ptr<c10d::Work> work;  // null: waited already
  std::string name;
  std::chrono::milliseconds timeout{0};
  bool on_device = false;
  std::vector<at::Tensor> keep_alive;
  JournalTicket ticket;
};

// Makes a backend of a group's transport, of `world_size` ranks over `store`, this process being
// `rank`.
using BackendFactory = std::function<c10::intrusive_ptr<c10d::Backend>(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size)>;

// How a group was formed, beyond CommunicatorOptions (the rendezvous makes it; a split group
// gets make_backend alone). The communicator keeps it for its lifetime.
struct GroupWiring {
  // A backend of this group's transport: split_group's groups. Null: the group cannot split.
  BackendFactory make_backend;
  // The rendezvous store's server (rank 0's, unless torchrun's agent serves it): held apart from
  // the store, so that it is freed with the communicator even when abort() leaves the group (and
  // its store) behind, and the job's restart can bind the port again.
  c10::intrusive_ptr<c10d::Store> server;
  // A later generation's group (connect_generation): the job's rendezvous store without this
  // generation's "gen<G>/" prefix, where the next generation's prefix goes, as on a spare that
  // opens the store afresh. Null for a job's first group, whose store() is that store.
  c10::intrusive_ptr<c10d::Store> unprefixed_store;
};

// The Communicator's friend: what core's comm code reaches inside it.
class CommunicatorAccess {
 public:
  // What `comm` was made with; null: nothing.
  static const GroupWiring* wiring(const Communicator& comm) { return comm.wiring_.get(); }
  // `to` shares `from`'s abort(): a cancel of one ends the waits of both.
  static void share_abort(const Communicator& from, Communicator& to) {
    to.aborted_ = from.aborted_;
  }
  // The backend inside its wrappers (comm/decorating_backend.h); null at world size 1.
  static c10d::Backend* backend(Communicator& comm) { return comm.group_.get(); }
  // Throws std::invalid_argument unless `tensor` is on the communicator's device.
  static void require_on_device(const Communicator& comm, const at::Tensor& tensor,
                                const std::string& name) {
    comm.require_on_device(tensor, name);
  }
  // Launches `call` (a collective on the backend it is given, inside its wrappers) as the
  // communicator launches its own: under its launch mutex, journaled as `op` over `journaled`,
  // its span tracked, failing at launch after abort(). `keep_alive` stays referenced until
  // wait(). Defined in communicator.cpp.
  static PendingCollective launch(
      Communicator& comm, Collective op, const std::string& name, const at::Tensor& journaled,
      int64_t bytes,
      const std::function<c10::intrusive_ptr<c10d::Work>(c10d::Backend& group)>& call,
      std::vector<at::Tensor> keep_alive);
  // A reduce-scatter whose `exchange` leaves the sum in its output.
  static PendingReduceScatter reduce_scatter(PendingCollective exchange) {
    return PendingReduceScatter(std::move(exchange));
  }
  // The journal entry of `comm`'s collective `seq`, and what ends its wait. Defined in
  // communicator.cpp.
  static JournalTicket ticket(const Communicator& comm, int64_t seq);
};

}  // namespace ddpd::detail
