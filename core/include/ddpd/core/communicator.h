// Collectives over a c10d process group, each with a timeout and a recorded time span.
#pragma once

#include <ATen/ATen.h>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include "ddpd/common/job_options.h"
#include "ddpd/core/collective_error.h"
#include "ddpd/core/collective_journal.h"
#include "ddpd/core/collective_recorder.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddpd {

struct RendezvousOptions;
class Communicator;
std::shared_ptr<Communicator> connect_generation(const RendezvousOptions&, int, Communicator*,
                                                 const std::function<bool()>&);

namespace detail {
class PeerFailureWatch;
class SharedMemoryCapability;
class Timeline;
struct TimePoint;
}  // namespace detail

// A collective's entry in its communicator's journal, marked failed when wait() throws.
struct JournalTicket {
  std::shared_ptr<CollectiveJournal> journal;  // null: not journalled
  int64_t seq = 0;
  std::chrono::steady_clock::time_point epoch;       // the communicator's clock
  std::shared_ptr<const std::atomic<bool>> aborted;  // Communicator::abort(); null: never
  // A peer's announced failure ends the wait (comm/peer_failure_watch.h); null: not watched.
  std::shared_ptr<detail::PeerFailureWatch> peer_failures;
  // A group of two's other rank: a peer that ended, which Gloo's words do not name, is it.
  // -1: more peers than one.
  int only_peer = -1;
};

// An asynchronous collective. On CPU (Gloo), wait() blocks until it completes or the
// communicator's timeout passes, and throws std::runtime_error (with the collective's name) on
// timeout or failure (a CollectiveError). On CUDA (NCCL), wait() makes the caller's current stream
// wait for the collective without blocking the host (a timeout there would turn newer PyTorch's
// wait into a host-side poll); NCCL's watchdog enforces the timeout given to the process group. The
// tensors passed in `keep_alive` stay referenced until wait(), so their memory is not reused
// by the caller's stream before the collective is done with it.
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
  // Waits for a host-side work (Gloo, shm) up to timeout_ in slices of kAbortCheck, so that an
  // aborted communicator stops waiting within a slice; the last slice's timeout is the
  // backend's own error, as a single wait would throw it.
  void wait_on_host(c10d::Work& work);

  c10::intrusive_ptr<c10d::Work> work_;
  std::string name_;
  std::chrono::milliseconds timeout_{0};
  bool on_device_ = false;
  std::vector<at::Tensor> keep_alive_;
  JournalTicket ticket_;
};

// A reduce-scatter in flight. wait() leaves in `output` the sum over ranks of this rank's chunk
// (or throws as PendingCollective::wait does). On Gloo the exchange is an all-to-all of the
// chunks and wait() adds the N received chunks in rank order.
class PendingReduceScatter {
 public:
  PendingReduceScatter() = default;  // complete
  PendingReduceScatter(PendingCollective exchange, at::Tensor received, at::Tensor output);
  void wait();

 private:
  PendingCollective exchange_;
  at::Tensor received_;  // [N, chunk]: rank r's copy of this rank's chunk; undefined: no sum
  at::Tensor output_;
};

// How a communicator runs its collectives. Defaults suit a CPU rank.
struct CommunicatorOptions {
  std::chrono::milliseconds timeout{// every collective (--timeout)
                                    static_cast<int64_t>(kDefaultCollectiveTimeoutSeconds * 1000)};
  at::Device device = at::kCPU;  // where collectives' tensors live: CPU (Gloo), the rank's GPU
  size_t journal_size = CollectiveJournal::kDefaultCapacity;  // --journal-size (2000)
  // --check-collectives (debug, off): before each collective the ranks all-gather its
  // fingerprint (sequence number, op, element count, dtype) and fail with both sides named when
  // they differ. One small blocking all-gather per collective.
  bool check_collectives = false;
  // The CPU group's transport (gloo or shm; CUDA groups are nccl whatever it says) and, when
  // --transport auto fell back to Gloo, why. Reported in results and metrics.
  GroupTransport transport = GroupTransport::kGloo;
  std::string transport_note;
  // --inject skip-collective on this rank: the fault injector sets it, and the next collective
  // is dropped (comm/skip_injection.h). Null: no such fault.
  std::shared_ptr<std::atomic<bool>> skip_next_collective;
  // host:port of the rendezvous store the group formed over; empty at world size 1. A group of a
  // later generation (connect_generation) keeps the store when the endpoint stays the same.
  std::string rendezvous_endpoint;
  // Makes a backend of this group's transport, of `world_size` ranks over `store`, this process
  // being `rank` (rendezvous sets it): split()'s groups. Null: the group cannot split (world
  // size 1, or a backend made by hand).
  std::function<c10::intrusive_ptr<c10d::Backend>(const c10::intrusive_ptr<c10d::Store>& store,
                                                  int rank, int world_size)>
      make_backend;
};

// Who a communicator is: its rank and world size, and the options it runs with (transport:
// gloo, shm or nccl; with world size 1, none).
struct CommunicatorInfo : CommunicatorOptions {
  int rank = 0;
  int world_size = 1;
};

// The collectives of one rank over a c10d backend, in c10d's shape: launch, wait, timeout and
// abort. What else a collective needs goes elsewhere:
//   - its record (journal, traffic, spans): recorder(), fed at each launch, as PyTorch's flight
//     recorder is;
//   - the debug features: wrappers around the backend that the constructor stacks from the
//     options (comm/decorating_backend.h: --check-collectives, --inject skip-collective);
//   - the shm backend's shared buffers: ddpd/core/collective_buffers.h, through shared_memory();
//   - the exchange of failure reports: comm/failure_exchange.h, through store().
//   - a Gloo peer's announced failure, which ends this rank's waits: comm/peer_failure_watch.h.
// A group that failed or was aborted is not reused: a new group, over a new store prefix, gets a
// new Communicator (connect_generation in rendezvous.h; docs/healing.md).
// Thread contract: collectives may be launched from the training thread and from autograd
// hooks (on CUDA, autograd's device thread); launches are serialised by an internal mutex, and
// every rank must launch the same collectives in the same order (c10d matches them by order).
// Span recording is thread-safe (on CPU, completion is recorded on the backend's threads; on
// CUDA, by events read back in take_spans). With world_size 1 and no process group, every
// collective is the identity and completes at once.
class Communicator {
 public:
  // `store` is the rendezvous store the group was built over (null for world size 1); after a
  // failed collective the ranks exchange their positions through it. `server` (rank 0's) is the
  // store's server, kept for the communicator's lifetime and released with it even when abort()
  // leaves the group behind.
  Communicator(c10::intrusive_ptr<c10d::Backend> group, int rank, int world_size,
               CommunicatorOptions options = {}, c10::intrusive_ptr<c10d::Store> store = {},
               c10::intrusive_ptr<c10d::Store> server = {});
  ~Communicator();

  // Ends every wait on a collective, current and later, with a CollectiveError saying the job
  // was cancelled, within 0.1 s, whatever the collective waits for; a collective launched
  // afterwards throws that CollectiveError at its launch. The daemon calls it on
  // cancel: a rank blocked in a collective whose peer is gone (stopped, partitioned) used to
  // hold its worker until --timeout. Afterwards the communicator is unusable; on CPU its
  // destructor leaves the group to its threads (a Gloo collective in flight cannot be
  // abandoned, and destroying the group joins them: up to --timeout). Thread contract: any
  // thread, any time (the daemon's session thread, while the rank's thread waits).
  void abort();
  bool aborted() const { return aborted_->load(); }

  const CommunicatorInfo& info() const { return info_; }
  // The journal, traffic and spans of this communicator's collectives, and its clock.
  CollectiveRecorder& recorder() { return *recorder_; }
  const CollectiveRecorder& recorder() const { return *recorder_; }
  // The backend's shared memory (the shm backend's capability); null for Gloo and NCCL.
  detail::SharedMemoryCapability* shared_memory() const { return shared_memory_; }
  // The rendezvous store the group was built over; null for world size 1.
  const c10::intrusive_ptr<c10d::Store>& store() const { return store_; }

  // The collectives. Naming rule: a collective that returns a Pending… is asynchronous (launched
  // in order on every rank; wait() before reading its result), as c10d's return a Work; one that
  // returns void blocks until it is done. `_async` marks the asynchronous form only where the
  // same op also has a blocking one (reduce_scatter_sum). Every collective carries the
  // communicator's timeout and is journaled, and refuses a tensor that is not on device() with
  // std::invalid_argument naming the collective, at every world size (1 included, where nothing
  // is exchanged): ProcessGroupNCCL takes only its GPU's tensors, so a host tensor handed to a
  // CUDA communicator shows on the first 1-GPU or CPU-only run.
  //
  // In-place sum across ranks (fp32, bf16 and fp16 on every transport).
  PendingCollective all_reduce_sum(at::Tensor& tensor, const std::string& name);
  // In-place element-wise `op` (MAX and MIN: the param spread, the benchmark's slowest rank),
  // waited for.
  void all_reduce(at::Tensor& tensor, c10d::ReduceOp op, const std::string& name);
  // Rank `root`'s tensor is copied into every rank's.
  PendingCollective broadcast(at::Tensor& tensor, int root, const std::string& name);
  // output (world_size * input.numel(), contiguous 1-D) gets every rank's input in rank order.
  PendingCollective all_gather(at::Tensor& output, const at::Tensor& input,
                               const std::string& name);
  // input is 1-D with world_size * output.numel() elements; output gets the sum over ranks of
  // this rank's chunk. NCCL and shm run their reduce-scatter. On Gloo it runs as an all-to-all
  // of the chunks (each rank sends (N-1)/N of the input, as a ring would, but asynchronously on
  // Gloo's own threads, so backward goes on while it travels) and the sum of the N received
  // chunks at wait(). Not Gloo's _reduce_scatter_base: in LibTorch 2.11 it clones the whole
  // input and all-reduces the clone, moving twice the bytes through a buffer of the same
  // full size as our receive buffer. `input` and `output` must stay alive until then.
  PendingReduceScatter reduce_scatter_sum_async(at::Tensor& output, const at::Tensor& input,
                                                const std::string& name);
  // Whether reduce_scatter_sum_keeping_predecessor_async runs here: over shm, at world > 1.
  bool reduce_scatter_keeps_predecessor() const {
    return shared_memory_ != nullptr && info_.world_size > 1;
  }
  // reduce_scatter_sum_async that also leaves in `predecessor_output` (the output's shape) the
  // sum rank (rank - 1) mod N gets in its output, bit for bit, within the same collective
  // (fsdp's --shard-replicas). Only where reduce_scatter_keeps_predecessor(); elsewhere a
  // caller shifts the sums around the ring itself (comm/ring_shift.h). All three tensors must
  // stay alive until wait().
  PendingReduceScatter reduce_scatter_sum_keeping_predecessor_async(at::Tensor& output,
                                                                    at::Tensor& predecessor_output,
                                                                    const at::Tensor& input,
                                                                    const std::string& name);
  void barrier();

  // c10d's split_group: a communicator of `members` (ranks of this group, ascending; rank i of
  // the new group is members[i]) over this group's transport, formed through this group's store
  // under "split/<tag>/". Only the members call it, each once per tag and generation; it blocks
  // until every member has (the backend's own exchange, within the timeout). The new group has
  // this one's options and shares its abort(): a cancel ends its waits too. Throws
  // std::logic_error when this rank is not a member or the group cannot split, and a
  // CollectiveError (the backend's cause; a peer as the new group numbers it, or -1) when the
  // group does not form, as when a member never comes within the timeout.
  std::shared_ptr<Communicator> split(const std::vector<int>& members, const std::string& tag);

 private:
  // Keeps the previous generation's store and its server (rendezvous.h).
  friend std::shared_ptr<Communicator> connect_generation(const RendezvousOptions&, int,
                                                          Communicator*,
                                                          const std::function<bool()>&);

  // Throws std::invalid_argument unless `tensor` is on device_ (see the collectives' contract).
  void require_on_device(const at::Tensor& tensor, const std::string& name) const;
  JournalTicket ticket(int64_t seq) const {
    return {recorder_->shared_journal(),
            seq,
            recorder_->epoch(),
            aborted_,
            peer_failures_,
            info_.world_size == 2 ? 1 - info_.rank : -1};
  }
  // The one launch path of the asynchronous collectives: under launch_mutex_, the launch mark,
  // the journal, `call` (the backend's collective, through the wrappers) and the span's
  // tracking.
  template <typename Call>
  PendingCollective launch(Collective op, const std::string& name, const at::Tensor& journaled,
                           int64_t bytes, Call&& call, std::vector<at::Tensor> keep_alive = {});
  PendingCollective track(c10::intrusive_ptr<c10d::Work> work, Collective op,
                          const std::string& name, int64_t seq, int64_t bytes,
                          const detail::TimePoint& launch, std::vector<at::Tensor> keep_alive = {});

  CommunicatorInfo info_;
  // The backend's shared memory: found before the wrappers hide the backend.
  detail::SharedMemoryCapability* shared_memory_ = nullptr;
  c10::intrusive_ptr<c10d::Backend> group_;  // the backend inside its wrappers
  // The backend gathers into and reduce-scatters out of flat buffers (NCCL, shm); else the
  // Gloo fallbacks (comm/gloo_fallbacks.h).
  bool flat_buffers_ = false;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::Store> server_;  // rank 0's; freed even when abort() leaves group_
  // A later generation's group (connect_generation): the job's rendezvous store without this
  // generation's "gen<G>/" prefix, where the next generation's prefix goes, as on a spare that
  // opens the store afresh. Null for a job's first group, whose store_ is that store.
  c10::intrusive_ptr<c10d::Store> unprefixed_store_;
  std::shared_ptr<std::atomic<bool>> aborted_ = std::make_shared<std::atomic<bool>>(false);
  // Gloo's host waits: a peer that announced its failure through the store ends them (shm's
  // segment and NCCL's watchdog already show a lost peer). Null: not watched.
  std::shared_ptr<detail::PeerFailureWatch> peer_failures_;
  std::mutex launch_mutex_;
  std::unique_ptr<CollectiveRecorder> recorder_;
};

}  // namespace ddpd
