// The step metrics' fields (StepMetrics, training_result.h), each named once. Every copy of a
// step's figures goes through this list: the result's JSON both ways (result_json.cpp,
// result_json_read.cpp) and the API's StepReport both ways (the worker, by name through
// protobuf's reflection). tests/unit/step_fields_test.cpp checks that the list covers every
// member of StepMetrics but `spans` (a field added there and not here fails it), and that
// StepReport holds exactly these fields, by name and type, besides rank, attempt and spans.
#pragma once

#include <cstdint>
#include <optional>

#include "ddpd/common/training_result.h"

namespace ddpd {

// How a result JSON without the field reads: an error, 0 (fields older results lack), or none.
enum class StepFieldPresence { kRequired, kZeroWhenAbsent, kOptional };

// Calls visit(name, member pointer, presence) for each field, in StepReport's order.
template <typename Visit>
void for_each_step_field(Visit&& visit) {
  using P = StepFieldPresence;
  using M = StepMetrics;
  visit("step", &M::step, P::kRequired);
  visit("loss", &M::loss, P::kRequired);
  visit("step_seconds", &M::step_seconds, P::kRequired);
  visit("forward_seconds", &M::forward_seconds, P::kRequired);
  visit("backward_seconds", &M::backward_seconds, P::kRequired);
  visit("optimizer_seconds", &M::optimizer_seconds, P::kRequired);
  visit("comm_seconds", &M::comm_seconds, P::kRequired);
  visit("exposed_comm_seconds", &M::exposed_comm_seconds, P::kRequired);
  visit("comm_fraction", &M::comm_fraction, P::kRequired);
  visit("tokens_per_second", &M::tokens_per_second, P::kRequired);
  visit("param_spread", &M::param_spread, P::kOptional);
  visit("checkpoint_seconds", &M::checkpoint_seconds, P::kZeroWhenAbsent);
  visit("lr", &M::lr, P::kZeroWhenAbsent);
  visit("grad_norm", &M::grad_norm, P::kOptional);
  visit("eval_loss", &M::eval_loss, P::kOptional);
  visit("gradient_sync_bytes", &M::gradient_sync_bytes, P::kZeroWhenAbsent);
  visit("first_sample", &M::first_sample, P::kZeroWhenAbsent);
  visit("samples", &M::samples, P::kZeroWhenAbsent);
}

}  // namespace ddpd
