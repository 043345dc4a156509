// The Trainer's optimizer stack: AdamW over the synchroniser's optimizer parameters, in one of
// its forms:
//  - unsharded: torch's AdamW holds the options and state; fused_adamw_step (adamw_step.h)
//    updates them;
//  - ZeRO-1 (--shard-optimizer): a ShardedOptimizer (ddpd/core/sharded_optimizer.h), with the
//    ring predecessor's shard as a replica under --shard-replicas 1;
//  - fsdp with --shard-replicas 1: besides this rank's AdamW, a second one over the copy of the
//    ring predecessor's shards, stepped right after this rank's own with the same gradients'
//    bits, so the copy stays equal to the original.
// And what runs around the update: --clip-grad-norm, and the steps bucket by bucket inside the
// gradient synchronisation.
//
// Thread contract: the training thread's alone.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "ddpd/common/job_options.h"
#include "ddpd/core/communicator.h"
#include "ddpd/core/grad_sync.h"
#include "ddpd/core/sharded_optimizer.h"

namespace ddpd::detail {

class OptimizerStack {
 public:
  // AdamW with the job's hyperparameters over `sync`'s optimizer parameters (and its replica
  // parameters, where it has them). `comm` is ZeRO-1's.
  OptimizerStack(const DdpJobOptions& options, GradientSynchronizer& sync,
                 std::shared_ptr<Communicator> comm);

  // The optimizer of this rank's parameters: the plain AdamW, or ZeRO-1's local one.
  torch::optim::Optimizer& local();
  ShardedOptimizer* sharded() { return sharded_.get(); }         // null unless ZeRO-1
  torch::optim::Optimizer* replica() { return replica_.get(); }  // null unless fsdp's copy
  // The bytes of AdamW state this rank holds, its replica's included.
  int64_t state_bytes();
  // The learning rate of every AdamW this rank steps.
  void set_learning_rate(double lr);

  // The optimizer steps bucket by bucket inside the gradient synchronisation: bucketed on CPU
  // with more than one rank and without clipping (which needs every gradient's norm first).
  // AdamW is per parameter, so the result is the same as one step after the synchronisation.
  // With ZeRO-1 each bucket's owners step and their broadcasts start at once.
  bool steps_per_bucket() const { return steps_per_bucket_; }
  // A healing run steps after the whole synchronisation, so that a rank's state is at a step
  // boundary whenever a collective fails (heal/state_transfer.h).
  void step_after_synchronization() { steps_per_bucket_ = false; }

  // Finishes `sync`'s gradient synchronisation, stepping AdamW per bucket as each bucket's
  // average lands where steps_per_bucket(); returns the seconds of AdamW run inside it (optimizer
  // time, not exposed communication).
  double finish_synchronization(GradientSynchronizer& sync, Communicator& comm);
  // --clip-grad-norm: the global norm of the synchronised gradients (each rank's fsdp shards
  // summed over ranks by one all-reduce; replicated gradients are whole on every rank, tied
  // parameters appear once), and every gradient scaled by max_norm / (norm + 1e-6) when that is
  // below 1, as torch.nn.utils.clip_grad_norm_ does. Returns the norm before clipping.
  double clip_gradients(const DdpJobOptions& options, GradientSynchronizer& sync,
                        Communicator& comm);
  // The update, where the synchronisation did not run it per bucket; ZeRO-1 calls
  // `after_update` between its update and its broadcasts. Returns ZeRO-1's broadcast seconds.
  double step(const std::function<void()>& after_update);

 private:
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  std::unique_ptr<ShardedOptimizer> sharded_;
  std::unique_ptr<torch::optim::AdamW> replica_;
  bool steps_per_bucket_ = false;
};

}  // namespace ddpd::detail
