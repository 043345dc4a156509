// The held-out loss (--eval-data, --eval-every): the model's mean loss over --eval-batches global
// batches, the same ones every time (batches 0 .. B-1 of the eval order), across ranks.
//
// Thread contract: a collective; every rank calls it on its training thread, between steps.
#pragma once

#include "ddpd/common/job_options.h"
#include "ddpd/core/communicator.h"
#include "ddpd/core/grad_sync.h"
#include "ddpd/core/model.h"
#include "train/batches.h"

namespace ddpd::detail {

double evaluate(const DdpJobOptions& options, TransformerLMImpl& model, GradientSynchronizer& sync,
                Communicator& comm, const Batches& batches);

}  // namespace ddpd::detail
