// Healing's one seam (docs/healing.md): what the Trainer calls when a collective of a healable
// run fails, and when its rank joins a running job. Everything a heal does on a rank is reached
// from here: the regroup the caller gives, the state transfer (heal/state_transfer.h, with the
// Adam relay of heal/adam_state_relay.h). Reached through the state transfer, and kept beside
// what they serve: the strategies' regroup() and fsdp's relayout for a smaller group
// (strategies/fsdp_relayout.h: it cuts fsdp_shard.h's pieces and layouts), ZeRO-1's replicas and
// reshard (ddpd/core/sharded_optimizer.h: the optimizer steps them), and the group of two a
// state goes over (comm/communicator_split.cpp). The regroup itself is the caller's: on a worker it
// waits for the coordinator's HealGroup (worker/rank_main.cpp, over the rank pipe's protocol),
// and forms the group with connect_generation (ddpd/core/rendezvous.h).
//
// Protocol of a heal, on every survivor, in this order (heal()):
//  1. A collective fails with a CollectiveError (not a desync, not a cancel) in a run that
//     healable() allows and that was given a Regroup (Trainer::run).
//  2. Regroup: the caller's Regroup of generation G + 1 (on a worker, worker/rank_main.cpp's
//     RankRun::regroup waits for the coordinator's HealGroup, which coordinator/src/
//     job_healing.cpp decided, then forms the group with connect_generation, comm/rendezvous.h;
//     the old group is aborted). A null communicator: no heal, the failure goes on as without
//     healing.
//  3. A smaller group (a shrink in place, no spare): every survivor checks that --batch splits
//     into the new world's ranks x --grad-accum, and all refuse together, before any
//     collective (std::runtime_error).
//  4. The new group replaces the old in the Trainer (HealTarget::adopt_group); G + 1 becomes the
//     generation.
//  5. The state moves over it (transfer_training_state, heal/state_transfer.h: its own protocol,
//     replicated, ZeRO-1 and fsdp, healed and shrunk). A collective failure there fails the heal,
//     naming the generation; --inject exit-during-heal fires between its broadcasts.
//  6. The Trainer goes on at the source's completed steps, with the same global batch in the new
//     world's shares (HealTarget::go_on_at); the steps this rank reported past them are dropped
//     from the result, to be trained again.
//  7. The heal is recorded in the result (TrainingResult::heals) and printed to stderr.
// The rank that joins (join_generation G > 0) runs step 5 alone, before its first step, with no
// state (take_state_as_joiner), and records the heal with 0 s to regroup.
//
// Thread contract: the training thread's alone, as the Trainer's run().
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "ddpd/common/job_options.h"
#include "ddpd/common/training_result.h"
#include "ddpd/core/communicator.h"
#include "ddpd/core/trainer.h"
#include "heal/state_transfer.h"
#include "train/fault_injector.h"
#include "train/training_checkpoint.h"

namespace ddpd::detail {

// What a heal reads and changes in the Trainer that runs it.
class HealTarget {
 public:
  virtual ~HealTarget() = default;
  // The group the rank trains in now.
  virtual std::shared_ptr<Communicator> communicator() = 0;
  // Step 4: `next` replaces the group (the old one was aborted by connect_generation).
  virtual void adopt_group(std::shared_ptr<Communicator> next) = 0;
  // The training state over the group held now (what step 5 moves).
  virtual TrainingState training_state() = 0;
  // Step 6: training goes on at `completed_steps`, each rank with its share of `world`.
  virtual void go_on_at(int64_t completed_steps, int world) = 0;
};

class Healer {
 public:
  // `join_generation` > 0: this rank joins a running job in that generation.
  Healer(const DdpJobOptions& options, FaultInjector& injector, int join_generation);

  bool joining() const { return joining_; }
  // Whether this run can go on in a new group: a replicated strategy, or sharded state
  // (`sharded_optimizer`: ZeRO-1's shards; fsdp's) with --shard-replicas 1; more than one rank.
  bool healable(bool sharded_optimizer, int world) const;

  // Steps whose optimizer update this rank has applied (-1 while it joins with none): what step
  // 5 compares. The Trainer counts each update before the collectives that may follow it.
  int64_t completed_steps() const { return completed_steps_; }
  void set_completed_steps(int64_t steps) { completed_steps_ = steps; }

  // Steps 2-7 after `failure`. Returns the step to go on at; nullopt when regroup gave no group.
  std::optional<int64_t> heal(const Regroup& regroup, const CollectiveError& failure,
                              HealTarget& target, TrainingResult& result);
  // The rank that joins: the state of the group it joined. Returns the step to go on at.
  int64_t take_state_as_joiner(HealTarget& target, TrainingResult& result);

 private:
  void check_shrink(int world_before, int world) const;
  // Step 5 over `next`, with --inject exit-during-heal's point; a collective failure is rethrown
  // naming the generation that was healing.
  TransferredState transfer_state(HealTarget& target, std::shared_ptr<Communicator> next,
                                  int64_t steps_done, const ShrinkFrom& shrink = {});

  const DdpJobOptions& options_;
  FaultInjector& injector_;
  int generation_ = 0;  // the group generation the rank trains in
  bool joining_ = false;
  int64_t completed_steps_ = 0;
};

}  // namespace ddpd::detail
