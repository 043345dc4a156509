// StepMetrics (the job model) and StepReport (the API) into each other, field by field through
// ddpd/common/step_fields.h's list, by name through protobuf's reflection, so neither side
// spells the fields again.
#pragma once

#include "ddpd/common/training_result.h"
#include "ddpd/v1/ddpd.pb.h"

namespace ddpd {

// Every field of the list, and rank and attempt; spans are the caller's (per-rank reports only).
v1::StepReport to_report(const StepMetrics& metrics, int rank, int attempt);

// Every field of the list (not the spans).
StepMetrics from_report(const v1::StepReport& report);

}  // namespace ddpd
