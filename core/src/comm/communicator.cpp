#include "ddpd/core/communicator.h"

#include <algorithm>
#include <memory>
#include <stdexcept>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "comm/collective_check.h"
#include "comm/communicator_internals.h"
#include "comm/decorating_backend.h"
#include "comm/failure_cause.h"
#include "comm/gloo_fallbacks.h"
#include "comm/pairwise_reduce_scatter.h"
#include "comm/peer_failure_watch.h"
#include "comm/shared_memory_capability.h"
#include "comm/skip_injection.h"
#include "ddpd/common/seconds_since.h"

namespace ddpd {

namespace {

// Whether the backend gathers into and reduce-scatters out of flat buffers itself: NCCL, and
// the shared-memory group (which splits a reduce-scatter across the ranks). Gloo's flat forms
// in LibTorch 2.11 stage copies, so its collectives take detail::list_all_gather
// (comm/gloo_fallbacks.h) and detail::pairwise_reduce_scatter instead.
bool gathers_into_flat_buffers(const detail::SharedMemoryCapability* shared_memory,
                               const at::Device& device) {
  return device.is_cuda() || shared_memory != nullptr;
}

CommunicatorInfo info_of(CommunicatorOptions options, int rank, int world_size) {
  CommunicatorInfo info;
  static_cast<CommunicatorOptions&>(info) = std::move(options);
  info.rank = rank;
  info.world_size = world_size;
  if (world_size == 1) {
    info.transport = GroupTransport::kNone;
  } else if (info.device.is_cuda()) {
    info.transport = GroupTransport::kNccl;
  }
  return info;
}

// The backend inside the debug wrappers the options ask for (comm/decorating_backend.h). The
// skip is outermost: a dropped collective reaches neither the check nor the peers.
c10::intrusive_ptr<c10d::Backend> wrapped(c10::intrusive_ptr<c10d::Backend> group,
                                          const CommunicatorInfo& info) {
  if (!group) return group;
  if (info.check_collectives) {
    group = c10::make_intrusive<detail::DesyncCheckBackend>(std::move(group), info.device,
                                                            info.timeout);
  }
  if (info.inject_skip_collective) {
    group = c10::make_intrusive<detail::SkipInjectingBackend>(std::move(group));
  }
  return group;
}

// `call`'s work (the backend's collective, journaled as `seq`). A collective refused at launch (a
// wrapper's desync check, a backend's own check) is journaled as failed, as one that fails in
// wait() is, and its error goes on.
template <typename Call>
c10::intrusive_ptr<c10d::Work> started(CollectiveRecorder& recorder, int64_t seq, Call&& call) {
  try {
    return call();
  } catch (...) {
    recorder.shared_journal()->fail(seq, recorder.now());
    throw;
  }
}

// How often a host-side wait checks for Communicator::abort(). A slice that ends before the
// work costs one c10::Error (tens of microseconds): 10 a second at most, only in long waits.
constexpr std::chrono::milliseconds kAbortCheck{100};

// Waits for a host-side work (Gloo, shm) up to its timeout in slices of kAbortCheck, so that an
// aborted communicator stops waiting within a slice; the last slice's timeout is the backend's
// own error, as a single wait would throw it.
void wait_on_host(c10d::Work& work, const detail::CollectiveWork& pending) {
  const detail::JournalTicket& ticket = pending.ticket;
  auto remaining = pending.timeout;
  detail::PeerFailureWatch* watch = ticket.peer_failures.get();
  if (watch) watch->begin_wait();
  struct EndWait {
    detail::PeerFailureWatch* watch;
    ~EndWait() {
      if (watch) watch->end_wait();
    }
  } end_wait{watch};
  for (;;) {
    const auto slice = std::min(remaining, kAbortCheck);
    try {
      work.wait(slice);
      return;
    } catch (const std::exception& e) {
      // The slice ran out, or the work failed. A work that has completed (with its error, or
      // just after the slice ran out) is waited once more: that returns or throws its own
      // error, never the slice's stale timeout.
      if (work.isCompleted()) {
        work.wait(pending.timeout);
        return;
      }
      if (slice >= remaining) {
        throw TransportFailure(CollectiveFailure::kTimedOut, -1, detail::words_of(e));
      }
    }
    remaining -= slice;
    if (ticket.aborted && ticket.aborted->load()) {
      throw TransportFailure(CollectiveFailure::kAborted, -1, "the communicator was aborted");
    }
    if (const auto peer = watch ? watch->reported() : std::nullopt) {
      // The peer's cause, and no rank: the cross-rank analysis names the one that holds it.
      throw TransportFailure(peer->cause, -1,
                             "rank " + std::to_string(peer->rank) +
                                 " announced that its collective of this group failed (" +
                                 enum_name(peer->cause) + "); this rank stopped waiting");
    }
  }
}

}  // namespace

PendingCollective::PendingCollective() = default;
PendingCollective::PendingCollective(std::unique_ptr<detail::CollectiveWork> work)
    : work_(std::move(work)) {}
PendingCollective::~PendingCollective() = default;
PendingCollective::PendingCollective(PendingCollective&&) noexcept = default;
PendingCollective& PendingCollective::operator=(PendingCollective&&) noexcept = default;

void PendingCollective::wait() {
  if (!work_ || !work_->work) return;  // world size 1, or already waited
  detail::CollectiveWork& pending = *work_;
  auto work = std::move(pending.work);
  const detail::JournalTicket& ticket = pending.ticket;
  auto aborted = [&] { return ticket.aborted && ticket.aborted->load(); };
  try {
    if (aborted()) {
      throw TransportFailure(CollectiveFailure::kAborted, -1, "the communicator was aborted");
    }
    if (pending.on_device) {
      work->wait();  // orders the current stream after the collective
    } else {
      wait_on_host(*work, pending);
    }
    pending.keep_alive.clear();
  } catch (const std::exception& e) {
    if (ticket.journal) ticket.journal->fail(ticket.seq, seconds_since(ticket.epoch));
    // An aborted communicator's collectives fail however the backend words it.
    const TransportFailure failure =
        aborted() ? TransportFailure(CollectiveFailure::kAborted, -1, detail::words_of(e))
                  : detail::failure_of(e);
    // Gloo's words name no rank; in a group of two, a peer that ended is the other rank.
    const bool from_words = dynamic_cast<const TransportFailure*>(&e) == nullptr;
    const bool only_peer_ended =
        from_words && peer_ended(failure.cause()) && failure.peer_rank() < 0;
    throw CollectiveError(
        describe_collective_failure(pending.name, failure.cause(), pending.timeout, failure.what()),
        failure.cause(), only_peer_ended ? ticket.only_peer : failure.peer_rank());
  }
}

Communicator::Communicator(c10::intrusive_ptr<c10d::Backend> group, int rank, int world_size,
                           CommunicatorOptions options, c10::intrusive_ptr<c10d::Store> store,
                           std::shared_ptr<const detail::GroupWiring> wiring)
    : info_(info_of(std::move(options), rank, world_size)),
      shared_memory_(dynamic_cast<detail::SharedMemoryCapability*>(group.get())),
      transport_(group),
      group_(wrapped(std::move(group), info_)),
      flat_buffers_(gathers_into_flat_buffers(shared_memory_, info_.device)),
      store_(std::move(store)),
      wiring_(std::move(wiring)),
      recorder_(std::make_unique<CollectiveRecorder>(info_.device, info_.journal_size)) {
  TORCH_CHECK(world_size == 1 || group_, "a process group is required for world size ", world_size);
  if (store_ && world_size > 1 && !shared_memory_ && !info_.device.is_cuda()) {
    peer_failures_ = std::make_shared<detail::PeerFailureWatch>(store_, rank, world_size);
  }
}

Communicator::~Communicator() {
  if (!group_) return;
  if (info_.device.is_cuda()) {
    // What destroy_process_group() does: ProcessGroupNCCL destroyed without it warns that it
    // leaks, and its watchdog outlives the group (a 1-GPU run of the CUDA tests crashed at exit).
    // An aborted group aborts its communicators instead of draining them. Never throws here.
    try {
      if (aborted_->load()) {
        group_->abort();
      } else {
        group_->shutdown();
      }
    } catch (const std::exception&) {
    }
    return;
  }
  // An aborted CPU group may still run a collective on its own threads, and destroying it
  // joins them, which waits out that collective's timeout: the group is left to them instead
  // (its threads end with the process; a few buffers stay allocated until then).
  // So is one whose wait a peer's announced failure ended (comm/peer_failure_watch.h).
  if (aborted_->load() || (peer_failures_ && peer_failures_->reported())) {
    (void)group_.release();
    (void)transport_.release();  // the same backend, under its wrappers
  }
}

void Communicator::abort() { aborted_->store(true); }

detail::JournalTicket detail::CommunicatorAccess::ticket(const Communicator& comm, int64_t seq) {
  const CommunicatorInfo& info = comm.info_;
  return {comm.recorder_->shared_journal(),
          seq,
          comm.recorder_->epoch(),
          comm.aborted_,
          comm.peer_failures_,
          info.world_size == 2 ? 1 - info.rank : -1};
}

PendingCollective Communicator::track(c10::intrusive_ptr<c10d::Work> work, Collective op,
                                      const std::string& name, int64_t seq, int64_t bytes,
                                      const detail::TimePoint& launch,
                                      std::vector<at::Tensor> keep_alive) {
  recorder_->on_work(*work, op, name, seq, bytes, launch);
  return PendingCollective(std::make_unique<detail::CollectiveWork>(detail::CollectiveWork{
      std::move(work), name, info_.timeout, info_.device.is_cuda(), std::move(keep_alive),
      detail::CommunicatorAccess::ticket(*this, seq)}));
}

template <typename Call>
PendingCollective Communicator::launch(Collective op, const std::string& name,
                                       const at::Tensor& journaled, int64_t bytes, Call&& call,
                                       std::vector<at::Tensor> keep_alive) {
  // After abort() a collective fails at its launch, before the backend sees it: a backward whose
  // gradient hooks launch buckets ends at its next bucket instead of computing on for a group
  // that is gone (a heal's source computed on for 0.3 s of the small model's backward).
  if (aborted()) {
    throw CollectiveError(
        describe_collective_failure(name, CollectiveFailure::kAborted, info_.timeout,
                                    "the communicator was aborted"),
        CollectiveFailure::kAborted);
  }
  std::lock_guard<std::mutex> lock(launch_mutex_);
  const auto launched = recorder_->timeline().mark();
  const int64_t seq = recorder_->on_launch(enum_name(op), name, journaled);
  return track(started(*recorder_, seq, call), op, name, seq, bytes, launched,
               std::move(keep_alive));
}

void Communicator::require_on_device(const at::Tensor& tensor, const std::string& name) const {
  const at::Device on = tensor.device();
  const bool same =
      on.type() == info_.device.type() &&
      (!on.has_index() || !info_.device.has_index() || on.index() == info_.device.index());
  if (same) return;
  throw std::invalid_argument("collective '" + name + "': tensor on " + on.str() +
                              ", but the communicator's device is " + info_.device.str());
}

PendingCollective Communicator::all_reduce_sum(at::Tensor& tensor, const std::string& name) {
  require_on_device(tensor, name);
  if (info_.world_size == 1) return {};
  return launch(Collective::kAllReduce, name, tensor, tensor.nbytes(), [&] {
    std::vector<at::Tensor> tensors{tensor};
    c10d::AllreduceOptions options;
    options.reduceOp = c10d::ReduceOp::SUM;
    options.timeout = info_.timeout;
    return group_->allreduce(tensors, options);
  });
}

void Communicator::all_reduce(at::Tensor& tensor, c10d::ReduceOp op, const std::string& name) {
  require_on_device(tensor, name);
  if (info_.world_size == 1) return;
  launch(Collective::kAllReduce, name, tensor, tensor.nbytes(), [&] {
    std::vector<at::Tensor> tensors{tensor};
    c10d::AllreduceOptions options;
    options.reduceOp = op;
    options.timeout = info_.timeout;
    return group_->allreduce(tensors, options);
  }).wait();
}

PendingCollective Communicator::broadcast(at::Tensor& tensor, int root, const std::string& name) {
  require_on_device(tensor, name);
  if (info_.world_size == 1) return {};
  return launch(Collective::kBroadcast, name, tensor, tensor.nbytes(), [&] {
    std::vector<at::Tensor> tensors{tensor};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    options.timeout = info_.timeout;
    return group_->broadcast(tensors, options);
  });
}

PendingCollective Communicator::all_gather(at::Tensor& output, const at::Tensor& input,
                                           const std::string& name) {
  TORCH_CHECK(output.dim() == 1 && output.is_contiguous() &&
                  output.numel() == input.numel() * info_.world_size,
              "all_gather: output must be contiguous 1-D with world_size * input.numel()");
  require_on_device(input, name);
  require_on_device(output, name);
  if (info_.world_size == 1) {
    output.copy_(input.reshape(-1));
    return {};
  }
  at::Tensor flat_input = input.reshape(-1).contiguous();
  return launch(Collective::kAllGather, name, flat_input, output.nbytes(),
                [&] {
                  if (!flat_buffers_) {
                    return detail::list_all_gather(*group_, output, flat_input, info_.world_size,
                                                   info_.timeout);
                  }
                  c10d::AllgatherOptions options;
                  options.timeout = info_.timeout;
                  return group_->_allgather_base(output, flat_input, options);
                },
                {flat_input});
}

bool PendingCollective::completed() const {
  return !work_ || !work_->work || work_->work->isCompleted();
}

PendingReduceScatter::PendingReduceScatter(PendingCollective exchange)
    : exchange_(std::move(exchange)) {}

void PendingReduceScatter::wait() { exchange_.wait(); }

int64_t Communicator::reduce_scatter_buffer_bytes(int64_t output_bytes) const {
  if (info_.world_size == 1 || flat_buffers_) return 0;
  return detail::pairwise_reduce_scatter_buffer_chunks(info_.world_size) * output_bytes;
}

PendingReduceScatter Communicator::reduce_scatter_sum_async(at::Tensor& output,
                                                            const at::Tensor& input,
                                                            const std::string& name) {
  const int64_t chunk = output.numel();
  TORCH_CHECK(input.dim() == 1 && input.numel() == chunk * info_.world_size,
              "reduce_scatter: input must be 1-D with world_size * output.numel() elements");
  TORCH_CHECK(output.is_contiguous(), "reduce_scatter: output must be contiguous");
  require_on_device(input, name);
  require_on_device(output, name);
  if (info_.world_size == 1) {
    output.copy_(input);
    return {};
  }
  at::Tensor flat_input = input.contiguous();
  PendingCollective exchange = launch(
      Collective::kReduceScatter, name, flat_input, flat_input.nbytes(),
      [&]() -> c10::intrusive_ptr<c10d::Work> {
        if (!flat_buffers_) {
          // Counted whether or not a wrapper stands in, so the tags stay in step on every rank.
          const int tag = static_cast<int>(reduce_scatters_++ % (int64_t{1} << 30));
          return detail::launch_through_wrappers(
              *group_, {"reduce_scatter", flat_input.numel(), flat_input.scalar_type()}, [&] {
                return detail::pairwise_reduce_scatter(transport_, output, flat_input, tag,
                                                       info_.timeout);
              });
        }
        c10d::ReduceScatterOptions options;  // a real reduce-scatter (shm: split across ranks)
        options.reduceOp = c10d::ReduceOp::SUM;
        options.timeout = info_.timeout;
        return group_->_reduce_scatter_base(output, flat_input, options);
      },
      {flat_input, output});
  return PendingReduceScatter(std::move(exchange));
}

void Communicator::barrier() {
  if (info_.world_size == 1) return;
  std::lock_guard<std::mutex> lock(launch_mutex_);
  c10d::BarrierOptions options;
  options.timeout = info_.timeout;
  if (info_.device.is_cuda()) options.device_ids = {info_.device.index()};  // else NCCL guesses one
  CollectiveJournal& journal = *recorder_->shared_journal();
  const int64_t seq = journal.enqueue("barrier", "barrier", 0, "none", recorder_->now());
  auto work = started(*recorder_, seq, [&] { return group_->barrier(options); });
  PendingCollective(std::make_unique<detail::CollectiveWork>(
                        detail::CollectiveWork{std::move(work),
                                               "barrier",
                                               info_.timeout,
                                               info_.device.is_cuda(),
                                               {},
                                               detail::CommunicatorAccess::ticket(*this, seq)}))
      .wait();
  journal.complete(seq, recorder_->now());
}

PendingCollective detail::CommunicatorAccess::launch(
    Communicator& comm, Collective op, const std::string& name, const at::Tensor& journaled,
    int64_t bytes, const std::function<c10::intrusive_ptr<c10d::Work>(c10d::Backend& group)>& call,
    std::vector<at::Tensor> keep_alive) {
  return comm.launch(
      op, name, journaled, bytes, [&] { return call(*comm.group_); }, std::move(keep_alive));
}

}  // namespace ddpd
