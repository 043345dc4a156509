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

namespace detail {
// What only core's own comm code reaches (comm/communicator_internals.h): a collective's work and
// journal entry, how a group was formed, and the launch path for collectives beyond c10d's.
class CommunicatorAccess;
struct CollectiveWork;
struct GroupWiring;
class PeerFailureWatch;
class SharedMemoryCapability;
class Timeline;
struct TimePoint;
}  // namespace detail

// An asynchronous collective. On CPU (Gloo), wait() blocks until it completes or the
// communicator's timeout passes, and throws std::runtime_error (with the collective's name) on
// timeout or failure (a CollectiveError). On CUDA (NCCL), wait() makes the caller's current stream
// wait for the collective without blocking the host (a timeout there would turn newer PyTorch's
// wait into a host-side poll); NCCL's watchdog enforces the timeout given to the process group. The
// tensors the collective reads stay referenced until wait(), so their memory is not reused
// by the caller's stream before the collective is done with it.
class PendingCollective {
 public:
  PendingCollective();  // complete
  ~PendingCollective();
  PendingCollective(PendingCollective&&) noexcept;
  PendingCollective& operator=(PendingCollective&&) noexcept;

  void wait();
  // Whether wait() would return (or throw) at once: the collective ended (or was waited for, or
  // had nothing to do). Never blocks; on CUDA it asks the device.
  bool completed() const;

 private:
  friend class Communicator;
  explicit PendingCollective(std::unique_ptr<detail::CollectiveWork> work);

  std::unique_ptr<detail::CollectiveWork> work_;  // null: complete
};

// A reduce-scatter in flight. wait() leaves in `output` the sum over ranks of this rank's chunk
// (or throws as PendingCollective::wait does). Every transport sums into the output itself
// (Gloo: comm/pairwise_reduce_scatter.h).
class PendingReduceScatter {
 public:
  PendingReduceScatter() = default;  // complete
  void wait();
  // Whether wait() would return at once (PendingCollective::completed): fsdp frees a unit's full
  // gradient as soon as this says so.
  bool completed() const { return exchange_.completed(); }

 private:
  friend class Communicator;
  friend class detail::CommunicatorAccess;
  explicit PendingReduceScatter(PendingCollective exchange);

  PendingCollective exchange_;
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
  // --inject skip-collective on this rank: the constructor wraps the group in the switch that the
  // fault injector sets, and the next collective is dropped (comm/skip_injection.h).
  bool inject_skip_collective = false;
  // host:port of the rendezvous store the group formed over; empty at world size 1. A group of a
  // later generation (connect_generation) keeps the store when the endpoint stays the same.
  std::string rendezvous_endpoint;
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
//   - the collectives of one feature: free functions over the same launch path
//     (comm/predecessor_keeping_reduce_scatter.h: fsdp's --shard-replicas), and c10d's
//     split_group (comm/communicator_split.h);
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
  // failed collective the ranks exchange their positions through it. `wiring` (made by the
  // rendezvous: comm/communicator_internals.h) is how to form a group of this transport again,
  // for a split, and the store's server and unprefixed store, kept for the communicator's
  // lifetime; null: the group cannot split (a backend made by hand).
  Communicator(c10::intrusive_ptr<c10d::Backend> group, int rank, int world_size,
               CommunicatorOptions options = {}, c10::intrusive_ptr<c10d::Store> store = {},
               std::shared_ptr<const detail::GroupWiring> wiring = {});
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
  // this rank's chunk (in rank order over Gloo and shm), with no buffer of the input's
  // size: NCCL and shm run their reduce-scatter into the output; Gloo sends each rank its chunk
  // over send/recv and sums into the output on a driver thread
  // (comm/pairwise_reduce_scatter.h; one chunk of receive buffer beyond world 2, none at 2).
  // Not Gloo's _reduce_scatter_base: in LibTorch 2.11 it clones the whole input and all-reduces
  // the clone. `input` is only read; it and `output` must stay alive until wait().
  PendingReduceScatter reduce_scatter_sum_async(at::Tensor& output, const at::Tensor& input,
                                                const std::string& name);
  // Bytes reduce_scatter_sum_async allocates besides its output while in flight, for an output
  // of `output_bytes`: the memory accounting of fsdp's full gradients.
  int64_t reduce_scatter_buffer_bytes(int64_t output_bytes) const;
  void barrier();

 private:
  friend class detail::CommunicatorAccess;

  // Throws std::invalid_argument unless `tensor` is on device_ (see the collectives' contract).
  void require_on_device(const at::Tensor& tensor, const std::string& name) const;
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
  // The backend itself, found before the wrappers hide it: the Gloo reduce-scatter's sends
  // and receives go to it (the wrappers see that collective as a reduce_scatter).
  c10::intrusive_ptr<c10d::Backend> transport_;
  c10::intrusive_ptr<c10d::Backend> group_;  // the backend inside its wrappers
  // The backend gathers into and reduce-scatters out of flat buffers (NCCL, shm); else the
  // Gloo fallbacks (comm/gloo_fallbacks.h).
  bool flat_buffers_ = false;
  c10::intrusive_ptr<c10d::Store> store_;
  // The store's server (freed even when abort() leaves group_), its unprefixed store and the
  // backend factory split forms groups with. Null: none.
  std::shared_ptr<const detail::GroupWiring> wiring_;
  std::shared_ptr<std::atomic<bool>> aborted_ = std::make_shared<std::atomic<bool>>(false);
  // Gloo's host waits: a peer that announced its failure through the store ends them (shm's
  // segment and NCCL's watchdog already show a lost peer). Null: not watched.
  std::shared_ptr<detail::PeerFailureWatch> peer_failures_;
  std::mutex launch_mutex_;
  // Gloo's reduce-scatters launched so far (under launch_mutex_): each one's message tag, the
  // same on every rank.
  int64_t reduce_scatters_ = 0;
  std::unique_ptr<CollectiveRecorder> recorder_;
};

}  // namespace ddpd
