// The gradient-synchronisation strategies behind one interface.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ddpd/common/bucket_assignment.h"  // assign_buckets, kFirstBucketMiB
#include "ddpd/common/job_options.h"
#include "ddpd/core/communicator.h"

namespace ddpd {

// The dtype gradients travel in (--grad-compression). fp16 and bf16 follow PyTorch's
// fp16_compress_hook and bf16_compress_hook: divide by N, cast, all-reduce, cast back into the
// fp32 gradient. fp32 all-reduces the sum and divides by N afterwards.
enum class WireDtype { kFp32, kFp16, kBf16 };
WireDtype wire_dtype_of(GradCompression compression);

// Where a synchroniser reads parameter values that the model holds no memory for
// (ParameterMemory::kUnallocated): fsdp reads each rank's shard of an imported Hugging Face model
// straight from the mapped file (hf_weights.h), or of a resumed checkpoint from its files
// (training_checkpoint.h), and no rank holds the whole model.
class ParameterSource {
 public:
  virtual ~ParameterSource() = default;
  // Writes elements [begin, end) of the parameter named `name` (its name in the model, as
  // named_unique_parameters gives it), flattened row-major, into `out`: 1-D, end - begin
  // elements, of the parameter's dtype and device. Throws naming the tensor and its file.
  virtual void read(const std::string& name, int64_t begin, int64_t end,
                    const torch::Tensor& out) const = 0;
};

// Options for make_synchronizer. The job's options' defaults are DdpJobOptions' (kJobDefaults).
struct SyncOptions {
  Strategy strategy = kJobDefaults.strategy;
  double bucket_size_mb = kJobDefaults.bucket_size_mb;  // bucketed: cap per bucket, MiB
  WireDtype gradient_wire = WireDtype::kFp32;           // not fsdp (validate() refuses it)
  // bucketed: the first bucket's cap, MiB (kFirstBucketMiB); the smaller of this and
  // bucket_size_mb applies.
  double first_bucket_mb = kFirstBucketMiB;
  // overlap, bucketed: keep reverse registration order; else adopt rank 0's gradient-ready
  // order after the first step (DdpJobOptions::static_buckets).
  bool static_buckets = kJobDefaults.static_buckets;
  // overlap, bucketed: a resumed run's launch order, the one its checkpoint's run had agreed on
  // (GradientSynchronizer::launch_order), adopted from the first step so that the buckets and
  // their summation order are the uninterrupted run's. Empty, or not an order of the
  // parameters: reverse registration order until the first step's agreement.
  std::vector<int64_t> launch_order;
  // overlap, bucketed: reduce parameters that got no gradient as zeros instead of throwing.
  bool find_unused_parameters = kJobDefaults.find_unused_parameters;
  // fsdp (DdpJobOptions::fsdp_units, fsdp_prefetch, reshard_after_forward): one unit per block
  // of a UnitwiseModule (other modules are one unit whatever this says), units gathered ahead
  // of the one computing, and full parameters freed after each unit's forward.
  bool fsdp_whole_model = kJobDefaults.fsdp_units == FsdpUnits::kWhole;
  int fsdp_prefetch = static_cast<int>(kJobDefaults.fsdp_prefetch);
  bool reshard_after_forward = kJobDefaults.reshard_after_forward;
  // fsdp at world > 1 (DdpJobOptions::shard_replicas): each rank also keeps its ring
  // predecessor's shards, and receives their reduced gradients each step to step them too.
  bool shard_replicas = false;
  // A rank that joins a running job (healing, docs/healing.md): construction runs no collective
  // (no broadcast of rank 0's state, which a survivor's replaces, and no shared buckets, which
  // regroup() makes with the group's other ranks).
  bool joins_running_job = false;
  // Every rank built the same parameters (each read the same --init-from weights): construction
  // skips rank 0's broadcast, and with it a flat copy of the whole model on every rank.
  bool same_initial_state = false;
  // fsdp at world > 1 only: the model's parameters hold no memory (ParameterMemory::kUnallocated)
  // and each rank fills its shards (and any frozen parameter) from here; set same_initial_state
  // too. Not owned; used only during make_synchronizer.
  const ParameterSource* source = nullptr;
};

// The elements [begin, end) of a model parameter (flattened) that one optimizer parameter holds.
struct HeldRange {
  int64_t begin = 0;
  int64_t end = 0;
};

// Where GradientSynchronizer::relayout finds one old shard: the ranks of the new group that hold
// it, as their own shard or their copy, at the step to go on at (the same bits on each), and the
// one of them that sends it to the others.
struct OldShardHolders {
  int provider = -1;
  std::vector<bool> holds;  // by rank of the new group
};

// What travels with an fsdp shard's parameter elements when the shards are laid out again for a
// smaller group (GradientSynchronizer::relayout): the optimizer's state of each piece, an
// optimizer parameter of a rank's own shard (`own`) or of its copy of its predecessor's. The state
// is a step and channels() tensors of the piece's size (AdamW's two moments).
class ShardStateRelay {
 public:
  virtual ~ShardStateRelay() = default;
  virtual int channels() const = 0;
  // On an old shard's provider: `piece`'s state into `out` (channels() 1-D tensors of its
  // numel); returns its step, or -1 where it has none (out is then left as it is).
  virtual int64_t read(const torch::Tensor& piece, bool own,
                       const std::vector<torch::Tensor>& out) = 0;
  // Every rank, once a unit's old pieces have been read: their state is not needed again.
  virtual void drop(const torch::Tensor& piece, bool own) = 0;
  // A new piece's state: `values` (channels() 1-D tensors of its numel, its own memory) at
  // `step` (-1: none).
  virtual void write(const torch::Tensor& piece, bool own, std::vector<torch::Tensor> values,
                     int64_t step) = 0;
};

// fsdp's capability (GradientSynchronizer::sharding()): optimizer_parameters() are shards of the
// model's parameters, whose module tensors hold no memory between steps (at any world size,
// once laid out again).
class ParameterSharding {
 public:
  virtual ~ParameterSharding() = default;
  // With SyncOptions::shard_replicas: the copy of the ring predecessor's shards this rank keeps,
  // as optimizer parameters (registration order, their gradients set by
  // finish_gradient_synchronization like optimizer_parameters()'), and their ranges. Empty
  // otherwise.
  virtual std::vector<torch::Tensor> replica_parameters() = 0;
  virtual std::vector<HeldRange> replica_parameter_ranges() = 0;
  // Healing: rank `owner`'s shard as optimizer parameters: this rank's own, its replica (owner is
  // its predecessor), or else zeroed scratch of the same shapes.
  virtual std::vector<torch::Tensor> shard_parameters(int owner) = 0;
  // With SyncOptions::shard_replicas, shrinking in place: goes on over `comm`, a group one
  // smaller than the current one, with every unit laid out again for its size. Unit by unit in
  // the same order on every rank, old shard k's parameter elements, its pieces' steps and their
  // `relay` state go from shards[k].provider to every rank, unless every rank that needs part of
  // it holds it already; each rank then cuts its new shard and its new predecessor's out of the
  // unit's whole flat layout. Afterwards optimizer_parameters() and replica_parameters() are new
  // tensors. Returns the bytes this rank received.
  virtual int64_t relayout(std::shared_ptr<Communicator> comm,
                           const std::vector<OldShardHolders>& shards, ShardStateRelay& relay) = 0;
};

// Healing's capability (GradientSynchronizer::regrouping(), docs/healing.md): the strategy goes
// on in a new group generation after an interrupted step.
class Regrouping {
 public:
  virtual ~Regrouping() = default;
  // The launch order the ranks agreed on after the first step (overlap, bucketed; empty: none
  // agreed yet, or a strategy that has none). A rank that joins adopts its source's, to issue
  // the same collectives over the same bucket layouts; a checkpoint keeps it for a resume.
  virtual std::vector<int64_t> launch_order() const = 0;
  // Goes on over `comm`, a new group generation's: drops what was in flight and adopts
  // `launch_order` (the source rank's launch_order()). fsdp: at the same world size only.
  virtual void regroup(std::shared_ptr<Communicator> comm,
                       const std::vector<int64_t>& launch_order) = 0;
};

// Bytes of full (unsharded) parameters and gradients alive during a step, as the strategy holds
// them: replicated strategies hold the whole model and its gradients; fsdp holds the shards plus
// the units it has gathered and the full gradients it has not yet reduce-scattered (with their
// exchange buffers). Peaks since the last zero_grad().
struct UnshardedPeak {
  int64_t parameter_bytes = 0;
  int64_t gradient_bytes = 0;
  int64_t total_bytes = 0;     // of both at once (at most the sum of the two)
  int64_t gradient_units = 0;  // fsdp: units whose full gradients were alive at once; else 1
};

// Wraps a model for data-parallel training. Construction broadcasts rank 0's parameters and
// buffers so every rank starts identical (unless SyncOptions::joins_running_job). Per step the
// trainer calls, in this order: zero_grad(), prepare_forward(), forward+backward (K times under
// gradient accumulation, with set_sync_on_backward(false) before all but the last),
// finish_gradient_synchronization(), optimizer step on optimizer_parameters(),
// after_optimizer_step().
//
// Thread contract: all calls come from the training thread; overlapping strategies also run
// gradient-ready hooks on autograd's thread during backward, and those only launch collectives
// (bucketed's also copy a step's first gradient into its bucket).
class GradientSynchronizer {
 public:
  virtual ~GradientSynchronizer() = default;
  // The synchronisation that runs: the strategy's name, or "none" at world size 1 (whatever
  // strategy was asked for, a single rank runs no collective).
  virtual std::string name() const = 0;

  // Clears gradients before the next backward: every strategy drops them (bucketed keeps its
  // gradients as views into its buckets, and its ready hook copies each first gradient of a
  // step into its view).
  virtual void zero_grad();
  // FSDP gathers full parameters here; the others do nothing.
  virtual void prepare_forward() {}
  // Returns when every gradient of this step has been averaged over ranks (for fsdp: summed
  // into this rank's gradient shard and divided by N). Throws on collective failure/timeout.
  virtual void finish_gradient_synchronization() = 0;
  // finish_gradient_synchronization() in parts: `on_averaged` receives each group of optimizer
  // parameters as soon as their average is in place (bucketed: bucket by bucket in launch order,
  // while later buckets are still in flight), so the optimizer can step them meanwhile. The
  // default waits for everything and passes every optimizer parameter once.
  virtual void finish_gradient_synchronization_in_parts(
      const std::function<void(const std::vector<torch::Tensor>&)>& on_averaged) {
    finish_gradient_synchronization();
    on_averaged(optimizer_parameters());
  }
  // Tensors the optimizer updates: the trainable parameters, or for fsdp this rank's shards.
  virtual std::vector<torch::Tensor> optimizer_parameters() = 0;
  // The model's full parameters as every rank should agree on them (fsdp gathers them: a
  // collective, so every rank must call it). Used for the param spread and by tests.
  virtual std::vector<torch::Tensor> full_parameters() = 0;
  virtual void after_optimizer_step() {}
  // For each optimizer parameter, the elements of its model parameter it holds (the whole
  // tensor, or under fsdp the part in this rank's shard, possibly none). Checkpoints use it.
  virtual std::vector<HeldRange> optimizer_parameter_ranges();
  // Calls `visit` with the model's full parameters, a group at a time (fsdp: one unit at a time,
  // gathered for the call and freed after it; a collective, so every rank must call it). The
  // tensors are valid during the call only. Used for the param spread.
  virtual void visit_full_parameters(
      const std::function<void(const std::vector<torch::Tensor>&)>& visit) {
    visit(full_parameters());
  }
  // See UnshardedPeak.
  virtual UnshardedPeak step_peak_unsharded() const = 0;
  // Evaluation ran forward only after prepare_forward(): fsdp frees the gathered parameters.
  virtual void end_forward_only() {}

  // Capabilities beyond what every strategy does, as Communicator::shared_memory() offers shared
  // memory: each is asked for once where it is needed, and is null where the strategy has none.
  // fsdp shards its parameters (ParameterSharding); the replicated strategies, and fsdp with
  // SyncOptions::shard_replicas, go on in a new group after a lost rank (Regrouping).
  virtual ParameterSharding* sharding() { return nullptr; }
  virtual Regrouping* regrouping() { return nullptr; }

  // Gradient accumulation, as DDP's no_sync(): while off, backward only accumulates gradients
  // locally (overlapping strategies' hooks launch nothing); the backward of the step's last
  // micro-batch runs with it on and synchronises the accumulated sum. On by default.
  void set_sync_on_backward(bool enabled) { sync_on_backward_.store(enabled); }

 protected:
  bool sync_on_backward() const { return sync_on_backward_.load(); }

 private:
  std::atomic<bool> sync_on_backward_{true};  // read by hooks on autograd's thread
};

// The capabilities as their callers use them: the launch order a checkpoint keeps (none without
// Regrouping), fsdp's replica parameters (none elsewhere), and a capability a heal cannot go
// without (std::logic_error naming the strategy and what it lacks).
std::vector<int64_t> agreed_launch_order(GradientSynchronizer& sync);
std::vector<torch::Tensor> replica_parameters(GradientSynchronizer& sync);
Regrouping& regrouping_of(GradientSynchronizer& sync);
ParameterSharding& sharding_of(GradientSynchronizer& sync);

std::unique_ptr<GradientSynchronizer> make_synchronizer(torch::nn::Module& model,
                                                        std::shared_ptr<Communicator> comm,
                                                        const SyncOptions& options);

// Copies rank `root`'s parameters and buffers into every rank's module (blocking), in
// broadcasts of at most `chunk_bytes` through one reused buffer: no rank holds a flat copy of
// the model. Measured on the `small` preset's heal (1.5 GB of parameters and moments over shm,
// world 3 + a spare, 2 cores): 5.29 s through one flat buffer, 2.94 s in 64 MiB pieces; with
// tensors of 1 MiB or more broadcast in place, 1.48-1.78 s against 2.17-2.25 s (4 and 2 runs).
constexpr int64_t kBroadcastChunkBytes = int64_t{64} << 20;
void broadcast_module_state(torch::nn::Module& module, Communicator& comm, int root = 0,
                            int64_t chunk_bytes = kBroadcastChunkBytes);

// Max over parameters of (max - min across ranks), element-wise. A collective. Works through
// the parameters in chunks of at most 4 MiB, so it adds no model-sized temporary.
double parameter_spread(const std::vector<torch::Tensor>& parameters, Communicator& comm);
// The same over everything `sync` visits, unit by unit under fsdp.
double parameter_spread(GradientSynchronizer& sync, Communicator& comm);

// FSDP shard layout of one flattened parameter of `numel` elements over `world_size` ranks:
// padded to a multiple of world_size, each rank owning `shard_numel` elements.
struct ShardLayout {
  int64_t numel = 0;
  int64_t padded_numel = 0;
  int64_t shard_numel = 0;
};
ShardLayout shard_layout(int64_t numel, int world_size);

}  // namespace ddpd
