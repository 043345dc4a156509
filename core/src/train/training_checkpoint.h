// What a training checkpoint holds and how the Trainer writes and reads it: parameters, AdamW
// state (plain, ZeRO-1 or fsdp-sharded) and the metadata that resumes the data order.
// checkpoint.h is the file format underneath (docs/checkpoints.md).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ddpd/common/job_options.h"
#include "ddpd/core/communicator.h"
#include "ddpd/core/grad_sync.h"
#include "ddpd/core/model.h"
#include "ddpd/core/sharded_optimizer.h"
#include "train/checkpoint.h"

namespace ddpd::detail {

// The Trainer's state a checkpoint reads or writes, for one call.
struct TrainingState {
  const DdpJobOptions& options;
  Communicator& comm;
  TransformerLMImpl& model;
  GradientSynchronizer& sync;
  torch::optim::Optimizer& local_optimizer;  // the plain AdamW, or ZeRO-1's local one
  ShardedOptimizer* sharded;                 // ZeRO-1 (owners of state, replicas), or null
  // The model's unique parameters' names and shapes, taken before the synchroniser existed (fsdp
  // frees the full parameters between steps, leaving them empty).
  const std::vector<std::pair<std::string, std::vector<int64_t>>>& parameter_shapes;
  // fsdp with --shard-replicas 1: the AdamW of the ring predecessor's shards; else null.
  torch::optim::Optimizer* replica_optimizer = nullptr;
};

// Every rank writes its own file: refuse at the start, not at the first checkpoint, when this
// rank cannot write --checkpoint-dir (every worker of the job must reach it). OptionError.
void check_checkpoint_dir_writable(const DdpJobOptions& options, int rank);

// The checkpoint's parameters into the model, on every rank, before the synchroniser shards or
// broadcasts them. OptionError("--resume") when the model's shape differs.
void load_parameters(CheckpointReader& reader, TransformerLMImpl& model);
// The checks of load_parameters alone: the model's shape against the checkpoint's.
void check_parameters(CheckpointReader& reader, TransformerLMImpl& model);

// A checkpoint's parameters read by element range (SyncOptions::source): fsdp's resume reads
// each rank's shards and never holds the whole model. Check the shapes first
// (check_parameters). Thread contract: one thread at a time (the reader caches its checks).
class CheckpointParameterSource final : public ParameterSource {
 public:
  explicit CheckpointParameterSource(CheckpointReader& reader) : reader_(reader) {}
  void read(const std::string& name, int64_t begin, int64_t end,
            const torch::Tensor& out) const override;

 private:
  CheckpointReader& reader_;
};
// The AdamW state of the parameters this rank holds, and of its replica's (--shard-replicas).
void load_optimizer_state(CheckpointReader& reader, const TrainingState& state);
// The steps a checkpoint has done; OptionError("--batch") when its data position is not that
// many global batches of this job's.
int64_t resumed_step(const CheckpointReader& reader, const DdpJobOptions& options);
// The launch order the checkpoint's run had agreed on (SyncOptions::launch_order); empty when it
// had none, or the checkpoint predates the field. OptionError("--resume") when malformed.
std::vector<int64_t> resumed_launch_order(const CheckpointReader& reader);

// Saves the checkpoint of `steps_done` steps (a collective: every rank calls it) and returns its
// seconds, the step's stall. `crash_after_bytes` > 0: this rank's file stops there and the
// process exits (--inject crash-during-checkpoint).
double save_checkpoint(const TrainingState& state, int64_t steps_done, int64_t crash_after_bytes);

}  // namespace ddpd::detail
