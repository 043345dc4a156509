#pragma once
// Collectives between the ranks of one host through a shared-memory segment, behind c10d's
// process-group interface, so the Communicator, every strategy, the journal and the timeline use
// it exactly as they use Gloo (docs/shm-transport.md).
//
// Protocol. Every collective moves its data in chunks of at most one slot, and every chunk is
// three phases; a rank's `phase` counter in the segment counts the phases it has completed.
// Ranks run the same collectives in the same order (c10d's contract), so chunk g of the group
// (counted across collectives) is phases 3g+1..3g+3 on every rank and uses slot buffer g % 2:
//   1. write: wait until every rank has finished chunk g-2 (it used this buffer), then copy
//      into this rank's own slot what the others need of its input (all_reduce: every sub-range
//      but its own); phase 3g+1.
//   2. reduce (all_reduce, reduce_scatter): wait for every rank's phase 3g+1, then reduce the
//      sub-range this rank owns over every rank's input, in rank order (its own read from its
//      tensor), into its output and, for all_reduce, into that sub-range of its own slot,
//      which no other rank touches in this phase; phase 3g+2.
//   3. read: wait for every rank's phase 3g+2, copy the others' results out; phase 3g+3.
// So the reduction work is split across ranks, and with two buffers a rank writes chunk g+1
// while the others still read chunk g. Waits spin briefly, then yield; every wait has the
// collective timeout and fails at once when a peer died (its pid is gone, its heartbeat
// stopped for 2 s, or it left the group), naming the rank.
//
// An all-reduce of a tensor in a shared buffer (allocate_shared) is one chunk with a different
// division of work (the two-shot all-reduce of symmetric-memory designs):
//   1. no copy: phase 3g+1 only says "my data is complete", and peers read it where it is;
//   2. this rank reduces its sub-range over every rank's buffer, in rank order, and writes the
//      result into that sub-range of every rank's buffer; no other rank reads or writes that
//      sub-range in this phase;
//   3. nothing to copy: the wait for every rank's phase 3g+2 is the end. Every buffer then holds
//      the whole result, and no peer touches this rank's buffer again before this rank's next
//      phase 1, so the caller may write it as soon as the collective returns.
// A reduce-scatter that keeps the predecessor's sum (fsdp's --shard-replicas: each rank keeps a
// copy of its ring predecessor's shards, stepped with the same gradients) adds nothing to the
// three phases of each chunk, only to what they do:
//   2. reduce: the fused pass writes this rank's sum twice, into its output and into its own
//      piece of its own slot, which phase 1 leaves empty (that piece is read from the input);
//   3. read: copy the predecessor's sum out of the predecessor's own piece of its slot.
// The successor's copy is the predecessor's bits. The shift Gloo and NCCL take instead, after the
// reduce-scatters over a group of two per ring edge (comm/ring_shift.h), cost the step 5.3 %
// against 4.6 % at world 3, 4.2 % against 2.7 % at world 4 (fsdp, 2 cores, one A/B,
// docs/healing.md).
//
// A small all-reduce (at most kOnePhaseMaxBytes, private memory) is one chunk g in one phase:
// every rank does the whole reduction, redundantly, so that one barrier replaces three (each
// barrier a round of cross-core cache-line hand-offs and, on an oversubscribed host, yields):
//   1. write: wait until every rank has finished chunk g-2 (as above), copy this rank's whole
//      tensor into its own slot g % 2; phase 3g+1.
//   2. wait for every rank's phase 3g+1, then reduce every rank's slot (this rank's own term
//      read from its tensor: the same bits) in rank order into the tensor: element by element
//      the same sums as the three phases' sub-ranges, so the same bits at every size; then
//      phase 3g+3 at once (one store of +2), which says only "done reading slot g % 2".
// Phase 3g+2 is skipped, not waited for: every rank takes the same path for chunk g (the choice
// depends on the byte count and the slot size alone, the same on every rank), so no rank waits
// for 3g+2 in this chunk, and a wait for a later phase is a >= test a skipped value satisfies.
// Chunk numbering, buffer g % 2 and the reuse rule are unchanged, so one-phase and three-phase
// chunks mix in any order: a rank writes slot g % 2 again only at chunk g+2, after every rank's
// phase 3g+3, which each rank stores only after its last read of that slot.
//
// Each rank reads and writes its tensor's bytes once in all, as an in-place pass does; the
// copy-out design (reduce into its own buffer, then copy the others' sub-ranges from theirs)
// moved 2.5 bytes per byte at world 2 and ran at 0.55 of the in-place ceiling against 0.88
// (memmove ceiling, one A/B run).

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include "comm/shared_memory_capability.h"
#include "ddpd/common/shared_buffer_fallback.h"
#include "ddpd/core/collective_error.h"
#include "shm/segment.h"
#include "shm/shared_buffers.h"

namespace ddpd::shm {

// Slot size: 2 MiB per rank and buffer, 4 MiB per rank (a 100 MB all-reduce is 50 chunks; world 6
// maps 24 MiB).
constexpr int64_t kDefaultSlotBytes = int64_t{2048} << 10;
// Largest private all-reduce that runs as one phase (the protocol above); also bounded by the
// slot. One phase trades two barriers for N times the reduce work and a whole-tensor copy in
// (about 7 bytes of traffic per byte at world 4 against 4.5). Measured against three phases,
// both through the executor (tests/bench/bench_shm_one_phase.sh, 2 cores, load 2.3-3.9, medians
// of passes; docs/torch-backend.md "Figures"): at world 2 one phase was within noise or faster up
// to 2 MiB; at world 4 faster at 64 and 256 KiB (215 against 283 us, 368 against 388) and slower at
// 1 and 2 MiB (792 against 674 us, 1327 against 1029). So 256 KiB, at every world size.
constexpr int64_t kOnePhaseMaxBytes = int64_t{256} << 10;

// Every public collective checks at launch, on the calling thread, that it serves the op, the
// dtype and the device (shm/served.h), and throws a NotImplementedError naming all three
// otherwise: every rank fails the same check and nothing is queued. Reductions: SUM, AVG,
// PRODUCT, MIN, MAX (float32/64, bfloat16, float16, int8..int64, uint8; AVG floating only) and
// BAND, BOR, BXOR (integer dtypes), every rank reducing in rank order.
//
// Thread contract: collectives may be launched from any thread (the Communicator serialises
// launches); one executor thread runs them in launch order, and a heartbeat thread refreshes
// this rank's heartbeat. Works complete on the executor thread, except a blocking launch's
// (c10d's asyncOp false: torch.distributed's async_op=False, whose caller waits at once) made
// while no collective is queued or running: that one runs and completes on the launching thread
// before the launch returns, and the executor starts nothing meanwhile, so launch order holds.
// That saves the two thread hand-offs (launch -> executor, completion -> waiter) of a call the
// caller waits for anyway (figures in docs/torch-backend.md). The destructor stops both threads,
// failing what is still queued, and marks this rank as having left.
class ShmProcessGroup final : public c10d::Backend, public detail::SharedMemoryCapability {
 public:
  // `ranks_on_host`: the job's ranks that share this host's cores, which decides how long a wait
  // spins; at least world_size (a group split from the job's has fewer ranks than the host).
  ShmProcessGroup(Segment segment, int rank, int world_size, std::chrono::milliseconds timeout,
                  int ranks_on_host = 0);
  ~ShmProcessGroup() override;

  const std::string getBackendName() const override { return "shm"; }
  // By rank: whether the segment shows that rank's process gone (pid gone, heartbeat stopped,
  // or it left the group). Any thread.
  std::vector<bool> gone_ranks() const override;

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& options) override;
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& options) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& options) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& options) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& options) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& options) override;

  // Collective (every rank, same sizes, same order, as a collective): a zeroed 1-D tensor of
  // `numel` elements in memory every rank maps (shm/shared_buffers.h). All-reduces on it read
  // the peers' data in place. Falls back to private memory on every rank when any rank cannot
  // create or map its buffer (a small /dev/shm): the result is then an ordinary tensor, and
  // last_shared_fallback() says which rank failed, at which step, with which errno. Any thread
  // that may launch collectives, one at a time.
  at::Tensor allocate_shared(int64_t numel, const at::TensorOptions& options) override;
  // Why the latest allocate_shared fell back (none when it did not). allocate_shared's thread.
  const std::optional<SharedBufferFallback>& last_shared_fallback() const override {
    return last_shared_fallback_;
  }
  // Whether `tensor` lies wholly in a buffer from allocate_shared. Any thread.
  bool is_shared(const at::Tensor& tensor) const override {
    return !shared_buffers_->find(tensor.data_ptr(), tensor.nbytes()).empty();
  }
  // _reduce_scatter_base (sum) that also leaves in `predecessor_output` the predecessor's sum,
  // bit for bit (the header's protocol). Any thread that may launch collectives.
  c10::intrusive_ptr<c10d::Work> reduce_scatter_keeping_predecessor(
      at::Tensor& output, at::Tensor& predecessor_output, const at::Tensor& input) override;

 private:
  using Deadline = std::chrono::steady_clock::time_point;
  // Queues `run` for the executor; the returned work completes when it has run. Its deadline is
  // `timeout` after now, or the group's timeout when that is c10d::kUnsetTimeout. `blocking`
  // (the options' asyncOp false) with nothing queued or running: runs it on this thread instead
  // (the thread contract above), and the returned work is complete.
  c10::intrusive_ptr<c10d::Work> enqueue(std::vector<at::Tensor> outputs,
                                         std::function<void(Deadline)> run, c10d::OpType type,
                                         std::chrono::milliseconds timeout, bool blocking = false);
  void execute_loop();
  void heartbeat_loop();
  struct Task;
  // Runs `task` and completes its work (the thread that set running_).
  void run_task(Task& task);

  // Phase bookkeeping ("executor thread only" here and below: the thread running a task, the
  // executor or a blocking launch's, one at a time by running_).
  void finish_phase();
  // Waits until `ranks` (all when empty) have completed `phase`; throws a TransportFailure on
  // timeout or a dead peer, naming it.
  void wait_for_phase(uint64_t phase, Deadline deadline, int only_rank = -1);
  // Why peer `rank` can no longer take part (kPeerExited or kPeerSilent, naming it); none while
  // it can.
  std::optional<TransportFailure> peer_gone(int rank) const;

  // One chunk g's three phases around the caller's work (executor thread only).
  void chunk(const std::function<void(int buffer)>& write,
             const std::function<void(int buffer)>& reduce,
             const std::function<void(int buffer)>& read, Deadline deadline);

  // One chunk g in one phase (the header's small all-reduce; executor thread only).
  void one_phase_chunk(const std::function<void(int buffer)>& write,
                       const std::function<void(int buffer)>& reduce, Deadline deadline);

  void all_reduce(const at::Tensor& tensor, c10d::ReduceOp op, Deadline deadline);
  // all_reduce of a private tensor of at most kOnePhaseMaxBytes and one slot, in one phase.
  void all_reduce_one_phase(const at::Tensor& tensor, c10d::ReduceOp op, Deadline deadline);
  // all_reduce of a tensor in a shared buffer; `by_rank`: each rank's copy of it.
  void all_reduce_shared(const at::Tensor& tensor, c10d::ReduceOp op,
                         const std::vector<char*>& by_rank, Deadline deadline);
  // Every rank's `record` (at most kRecordBytes), through this group's all-gather.
  std::vector<std::string> exchange(const std::string& record);
  // One rank's part of allocate_shared, as the ranks exchange it (three int32s).
  struct AllocationStatus {
    static constexpr int32_t kCreateFailed = 1;
    static constexpr int32_t kMapFailed = 2;
    int32_t failed_step = 0;  // 0: created and mapped every peer's
    int32_t peer = -1;        // kMapFailed: whose object
    int32_t error_number = 0;
    bool failed() const { return failed_step != 0; }
  };
  std::vector<AllocationStatus> exchange_statuses(const AllocationStatus& mine);
  void all_gather(const char* input, int64_t bytes, const std::vector<char*>& outputs,
                  Deadline deadline);
  void broadcast_bytes(char* data, int64_t bytes, int root, Deadline deadline);
  // `predecessor_out` (null: none) gets the sum rank (rank - 1) mod N reduces, through the
  // read phase (the header's protocol).
  void reduce_scatter(const at::Tensor& output, const at::Tensor& input, c10d::ReduceOp op,
                      Deadline deadline, char* predecessor_out = nullptr);

  Segment segment_;
  std::shared_ptr<SharedBuffers> shared_buffers_ = std::make_shared<SharedBuffers>();
  const std::chrono::milliseconds timeout_;
  const uint64_t spin_limit_;  // pause-spins before a wait yields (16× that before it sleeps)
  uint64_t chunks_done_ = 0;   // chunks this rank has completed (executor thread only)
  std::chrono::milliseconds running_timeout_{0};  // the running task's (executor thread only)
  std::exception_ptr broken_;  // set once a collective failed: later ones fail with it
  std::optional<SharedBufferFallback> last_shared_fallback_;  // allocate_shared's thread

  std::mutex mutex_;
  std::condition_variable wake_;
  struct Task {
    c10::intrusive_ptr<c10d::Work> work;
    std::function<void(Deadline)> run;
    Deadline deadline;
    std::chrono::milliseconds timeout;  // the deadline's, for the timeout's message
  };
  std::deque<Task> queue_;  // guarded by mutex_
  bool running_ = false;    // guarded by mutex_: a task runs (on the executor or a launcher)
  bool stopping_ = false;   // guarded by mutex_; read by waits through stop_requested_
  std::atomic<bool> stop_requested_{false};
  std::thread executor_;
  std::thread heartbeat_;
};

}  // namespace ddpd::shm
