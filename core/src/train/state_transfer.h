// Healing's state transfer (docs/healing.md): once a lost rank's replacement has joined a new
// group generation, every rank of it takes one survivor's training state, so that all go on bit
// for bit as the uninterrupted run would have.
//
// Protocol, over the new generation's communicator; every rank calls it, survivors and the rank
// that joins alike, in this order:
//  1. all_gather of each rank's completed steps (-1: it joins, with no state).
//  2. The source is the lowest rank among those with the most completed steps. A replicated
//     rank's state is only ever at a step boundary when a collective fails (a healable run steps
//     the optimizer after the whole synchronisation, not bucket by bucket), and every rank with
//     the same count holds the same bits; a rank that finished the interrupted step's update
//     holds what the uninterrupted run held after it.
//  3. The source broadcasts a header of int64s: its completed steps, the length of the
//     synchroniser's agreed launch order, and each optimizer parameter's AdamW step (-1: no
//     state yet); then the launch order itself, when it has one.
//  4. It broadcasts the parameters and buffers (one flat tensor), then the AdamW moments of the
//     parameters that have state (exp_avg and exp_avg_sq, one flat tensor).
//  5. Every rank adopts them: the synchroniser regroups over the new communicator with that
//     launch order, and AdamW state is created where it was missing, dropped where the source
//     has none.
// Nothing else travels: the data order is a function of the step (docs/data.md), and no random
// number is drawn after initialisation (the model has no dropout), so no generator state either.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "ddpd/core/communicator.h"
#include "train/training_checkpoint.h"

namespace ddpd::detail {

struct TransferredState {
  int source_rank = -1;
  int64_t completed_steps = 0;  // the source's: where every rank goes on
  int64_t bytes = 0;            // broadcast from the source
  double seconds = 0;
};

// Called between steps 4's two broadcasts with the source's completed steps: --inject
// exit-during-heal's point (fault_injector.h).
using AfterParameters = std::function<void(int64_t resumed_step)>;

// `state.comm` is the new generation's; `completed_steps` is -1 on the rank that joins.
// Throws std::runtime_error when no rank has state (every survivor was lost), and
// CollectiveError as the broadcasts do (a rank of the new group was lost while it ran).
TransferredState transfer_training_state(const TrainingState& state,
                                         std::shared_ptr<Communicator> comm,
                                         int64_t completed_steps,
                                         const AfterParameters& after_parameters = {});

}  // namespace ddpd::detail
