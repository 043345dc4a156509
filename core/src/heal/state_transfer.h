// Healing's state transfer (docs/healing.md): once a lost rank's replacement has joined a new
// group generation, every rank of it takes one survivor's training state, so that all go on bit
// for bit as the uninterrupted run would have.
//
// Protocol, over the new generation's communicator; every rank calls it, survivors and the rank
// that joins alike, in this order:
//  1. all_gather of each rank's completed steps (-1: it joins, with no state). Under a
//     replicated strategy the rank that joins first faults in the memory its state will land
//     in: its parameters and buffers, and AdamW moments for every parameter it steps.
//  2. The source is the lowest rank among those with the most completed steps. A replicated
//     rank's state is only ever at a step boundary when a collective fails (a healable run steps
//     the optimizer after the whole synchronisation, not bucket by bucket), and every rank with
//     the same count holds the same bits; a rank that finished the interrupted step's update
//     holds what the uninterrupted run held after it.
//  3. The source broadcasts a header of int64s: its completed steps, the length of the
//     synchroniser's agreed launch order, and each optimizer parameter's AdamW step (-1: no
//     state yet); then the launch order itself, when it has one.
//  4. It broadcasts the parameters and buffers (one flat tensor), then the AdamW moments of the
//     parameters that have state (exp_avg and exp_avg_sq, one flat tensor). Not where no rank
//     joins and every rank has completed the same steps (a shrink in place whose survivors all
//     stopped at one step boundary): a replicated strategy's ranks then hold the same bits
//     already (the same averaged gradients through the same arithmetic), and nothing moves.
//     Where the rank that joined is the only one whose count differs from the source's, on a
//     host transport (shm, Gloo) with more than two ranks, the source and that rank alone form a
//     group of two (split_group, under "split/heal_state/" of the generation's store)
//     and the broadcasts go over it; the other survivors hold the source's bits already and go
//     on to step 5. A failure there names the job's rank.
//  5. Every rank adopts them: the synchroniser regroups over the new communicator with that
//     launch order, and AdamW state is created where it was missing, dropped where the source
//     has none.
// Nothing else travels: the data order is a function of the step (docs/data.md), and no random
// number is drawn after initialisation (the model has no dropout), so no generator state either.
//
// ZeRO-1 with --shard-replicas 1 (sharded_optimizer.h): rank r's optimizer shard is also on its
// ring successor r + 1, which steps it, and its parameters, in place right after its own. The
// steps differ where they must:
//  1'. all_gather of each rank's (completed steps, updated steps): a rank updates its own shard
//      and its replica, then broadcasts its parameters, then counts the step completed. A rank
//      whose two counts differ failed mid-broadcast: its parameters are of two steps, but its
//      two shards' (parameters and moments) are whole at its updated count.
//  2'. plan_sharded_heal: the step T to go on at is the largest updated count at which every
//      shard k is held by its owner k or its holder k + 1 among the ranks with state (the owner
//      preferred): the shard's provider. None: the heal fails, naming every rank's counts (the
//      coordinator restarts the job from its checkpoint). The state source is the lowest rank
//      whose counts are both T (its parameters are all at T), else the lowest with state.
//  3'. As step 3, from the state source.
//  4'. The parameters and buffers from the state source, as step 4, where its parameters are
//      all at T; else its buffers and frozen parameters, and each shard's parameters from the
//      shard's provider (sending the source's first would overwrite the provider's). Then, shard
//      by shard in rank order, where the owner or the holder lacks shard k at T (it joined, or
//      it updated past T), the provider broadcasts the shard's AdamW steps and moments: the
//      owner takes them into its optimizer, the holder into its replica. As in step 4f, they go
//      over a group of the owner and the holder alone (at world 2, and over NCCL, the group
//      itself, where any other rank reads them into scratch).
//  5'. As step 5, and every rank's updated steps become T.
//
// ZeRO-1 with --shard-replicas 1 shrinking in place (no rank joins; the group is one smaller):
//  1''. As step 1', over the new group.
//  2''. plan_sharded_heal over the old group's numbering, the lost rank holding nothing: each
//       old shard's provider is its owner or its successor among the survivors.
//  3''. ShardedOptimizer::reshard lays the owners and replicas out again for N - 1 ranks, with
//       empty optimizers; then as step 3, without the sharded regroup.
//  4''. The parameters: nothing where every survivor's counts are both T (they hold the same
//       bits); else as step 4'.
//  5''. For each old shard k and new owner o, the AdamW steps and moments of k's parameters
//       that o now owns, from k's provider (its previous layout's optimizer) to o, which keeps
//       them, and o's successor, which keeps them as its replica; any other rank reads them
//       into scratch. Where o and its successor both held k at T (each k's owner or holder),
//       nothing travels: each moves its own copy into its new optimizer. Every rank's updated
//       steps become T.
//
// fsdp with --shard-replicas 1 (strategies/fsdp.cpp): rank r's shard (its parameters' elements
// and their AdamW state) is also on r + 1, which receives r's reduced gradient shard each step
// (inside the reduce-scatter over shm; comm/ring_shift.h elsewhere) and steps its copy with the
// same bits. At the same world size:
//  1f. As step 1', where a rank's updated steps are its completed steps (no collective follows
//      fsdp's update within a step).
//  2f. plan_sharded_heal, as step 2'.
//  3f. As step 3 (fsdp has no launch order); the synchroniser regroups: it drops what the
//      interrupted step left in flight and forms its ring over the new group.
//  4f. The buffers and frozen parameters from the state source (every rank holds them whole).
//      Then, shard by shard in rank order, where its owner or its holder lacks shard k at T, the
//      provider (one of the two) broadcasts the shard's parameter elements, then their AdamW
//      steps and moments, over a group of the owner and the holder alone (split from the new
//      group under "heal_shard<k>"; at world 2 the group itself): the owner keeps them as its
//      own, the holder as its replica. Other ranks take no part. Every rank goes through k in
//      ascending order, so no member waits on a pair whose other member waits on a later one.
//  5f. Training goes on at T.
//
// fsdp with --shard-replicas 1 shrinking in place (no rank joins; the group is one smaller):
//  1f''. As step 1f, over the new group.
//  2f''. plan_sharded_heal over the old group's numbering, the lost rank holding nothing: T, and
//        each old shard's provider, its owner or its successor among the survivors.
//  3f''. Unit by unit, in the same order on every rank (GradientSynchronizer::relayout,
//        strategies/fsdp_relayout.h): for each old shard k in rank order, every rank that holds
//        it at T copies its parameter elements and their AdamW moments into place, and where a
//        rank whose new shards overlap it does not hold it, its provider broadcasts them over
//        the new group; the pieces' steps go to every rank. Each rank then cuts its new shard
//        and its new predecessor's for N - 1 ranks out of the unit's flat layout, as a resume
//        at N - 1 reads them from a checkpoint by their ranges.
//        The old pieces' state is dropped unit by unit; the AdamW optimizers take the new pieces
//        and their state once every unit is laid out (heal/adam_state_relay.h).
//  4f''. The synchroniser goes on over the new group (the ring formed again where the transport
//        needs one); buffers and frozen parameters do not move (every survivor holds them
//        whole). Training goes on at T.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "ddpd/core/communicator.h"
#include "train/training_checkpoint.h"

namespace ddpd::detail {

struct TransferredState {
  int joined_rank = -1;  // the rank that came with no state: the lost rank's number
  int source_rank = -1;
  int64_t completed_steps = 0;  // the source's: where every rank goes on
  int64_t bytes = 0;            // broadcast from the source; 0 on a rank outside the pair
                                // that step 4 sends to (a survivor that holds the state); for
                                // fsdp shrinking in place, the bytes this rank received
  double seconds = 0;
};

// Called between steps 4's two broadcasts with the source's completed steps: --inject
// exit-during-heal's point (fault_injector.h).
using AfterParameters = std::function<void(int64_t resumed_step)>;

// One rank's progress at a sharded heal (step 1').
struct RankProgress {
  int64_t completed_steps = -1;  // -1: it joins
  int64_t updated_steps = -1;
};

struct ShardedHealPlan {
  int64_t target_step = 0;
  int state_source = -1;
  bool source_at_target = false;    // every parameter of the state source is at T
  std::vector<int> shard_provider;  // per shard (its owner's rank): a rank holding it at T
  std::vector<bool> moments_move;   // per shard: its owner or its holder lacks it at T
};

// Step 2': throws std::runtime_error naming every rank's counts when no step has all shards.
ShardedHealPlan plan_sharded_heal(const std::vector<RankProgress>& ranks);

// The group a shrink in place left: its size, and the rank lost from it (in its numbering).
struct ShrinkFrom {
  int world_size = 0;  // 0: not a shrink
  int lost_rank = -1;

  // The survivors above the lost rank go on one number lower.
  struct Renumbering {
    int lost_rank = -1;
    int new_rank_of(int old_rank) const { return old_rank > lost_rank ? old_rank - 1 : old_rank; }
    int old_rank_of(int new_rank) const { return new_rank >= lost_rank ? new_rank + 1 : new_rank; }
  };
};

// `state.comm` is the new generation's; `completed_steps` is -1 on the rank that joins.
// Throws std::runtime_error when no rank has state (every survivor was lost), and
// CollectiveError as the broadcasts do (a rank of the new group was lost while it ran).
TransferredState transfer_training_state(const TrainingState& state,
                                         std::shared_ptr<Communicator> comm,
                                         int64_t completed_steps,
                                         const AfterParameters& after_parameters = {},
                                         const ShrinkFrom& shrink = {});

}  // namespace ddpd::detail
