// ZeRO-1 optimizer-state sharding: a wrapper around any torch::optim optimizer.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

#include "ddpd/core/communicator.h"

namespace ddpd {

// Builds the wrapped optimizer from the parameter groups this rank owns.
using OptimizerFactory = std::function<std::unique_ptr<torch::optim::Optimizer>(
    std::vector<torch::optim::OptimizerParamGroup>)>;

// AdamW with the given default options.
OptimizerFactory adamw_factory(const torch::optim::AdamWOptions& options);

// Each parameter has one owner rank, chosen greedily (largest first, to the least-loaded rank
// by bytes) so ownership is balanced by size. step() runs the wrapped optimizer on owned
// parameters only — so optimizer state exists only for them — then every owner broadcasts its
// updated parameters. Gradients must already be averaged across ranks.
//
// In parts (the bucketed strategy, AdamW): step_part() steps the owned parameters of one bucket
// as soon as its average lands and launches that bucket's broadcasts at once, so they travel
// while later buckets are still being reduced and stepped; finish_step() waits for them. Every
// parameter must pass through exactly one step_part() between two finish_step() calls, in the
// same order on every rank. Measured on the bench config (2 ranks, shm, 2 cores): the ZeRO-1 step
// went from 1.09x to 1.03x the bucketed step (median of 3 alternating runs), as the broadcast
// and the owners' AdamW stopped waiting for the last bucket.
//
// Replicas (`replicas` = 1, --shard-replicas): each rank also keeps the optimizer state of its
// ring predecessor's shard (rank r holds shard r - 1's, mod the world size), stepped by a second
// optimizer on the same averaged gradients right after its own. The same per-element arithmetic
// on the same inputs gives the owner's bits, so a lost rank's shard is on its successor, at the
// successor's step count. No byte travels for it on a healthy step: the cost is a second
// optimizer step over 1/N of the parameters, and its state's memory (docs/healing.md).
//
// Thread contract: not thread-safe; call from the training thread. step() and
// add_param_group() are collectives/deterministic assignments: every rank must call them in
// the same order with the same parameters.
class ShardedOptimizer {
 public:
  ShardedOptimizer(std::vector<torch::optim::OptimizerParamGroup> groups, OptimizerFactory factory,
                   std::shared_ptr<Communicator> comm, int replicas = 0);
  ~ShardedOptimizer();

  // `after_update` runs between this rank's updates and the broadcasts (--inject
  // exit-after-update's point).
  void step(const std::function<void()>& after_update = {});
  // The owned parameters among `params` step (fused AdamW), and their broadcasts start.
  void step_part(const std::vector<torch::Tensor>& params);
  // Waits for the broadcasts step_part() launched and fills the receivers' parameters.
  void finish_step();
  void zero_grad();
  // Adds a group; its parameters are assigned owners continuing the balanced assignment.
  void add_param_group(const torch::optim::OptimizerParamGroup& group);

  int owner_of(const torch::Tensor& parameter) const;
  // The rank whose shard this rank's replica holds (its ring predecessor); -1 without replicas.
  int replica_of() const;
  // The optimizer stepping the predecessor's shard, or null without replicas.
  torch::optim::Optimizer* replica_optimizer();
  // The optimizer updates this rank has applied to its shards (step() counts one as soon as its
  // own and its replica's are done, before the broadcasts); the trainer sets it when it starts
  // or heals. A heal compares it with the completed steps (heal/state_transfer.h).
  int64_t updated_steps() const;
  void set_updated_steps(int64_t steps);
  // A heal's new group generation: the same ranks and world size, a new communicator.
  void regroup(std::shared_ptr<Communicator> comm);
  // What a layout held before reshard(): its optimizers, with their state, and its owners.
  struct PreviousLayout {
    std::unique_ptr<torch::optim::Optimizer> local;
    std::unique_ptr<torch::optim::Optimizer> replica;  // null without replicas
    std::vector<int> owners;                           // by parameter, in the old group's ranks
    int rank = -1;                                     // this rank's number in the old group
    int replica_rank = -1;
    // The optimizer that held `owner`'s shard's state on this rank (its own, or its replica);
    // null where it held none.
    torch::optim::Optimizer* holder_of(int owner) const;
  };
  // A shrink in place (docs/healing.md): the owners and replicas laid out again, by the same
  // greedy balance, for `comm`'s world size, with empty optimizers built by the factory; the
  // previous layout is returned for the state transfer to move its state from. Not a collective.
  PreviousLayout reshard(std::shared_ptr<Communicator> comm);
  // The optimizer this rank keeps `owner`'s shard's state in (its own, or its replica); null
  // where it keeps none.
  torch::optim::Optimizer* keeper_of(int owner);
  // Every parameter, in the order owners are assigned (the groups' order).
  const std::vector<torch::Tensor>& parameters() const;
  // Bytes of parameters owned by each rank.
  std::vector<int64_t> owned_bytes_per_rank() const;
  torch::optim::Optimizer& local_optimizer();
  // Seconds the last step() spent broadcasting updated parameters (finish_step(): waiting for
  // the broadcasts still in flight).
  double last_broadcast_seconds() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Bytes of optimizer state this rank holds: its own shard's, and its replica's.
int64_t optimizer_state_bytes(ShardedOptimizer& optimizer);

// Bytes held in `optimizer`'s per-parameter state (Adam/AdamW moments, SGD momentum, …).
int64_t optimizer_state_bytes(torch::optim::Optimizer& optimizer);

}  // namespace ddpd
