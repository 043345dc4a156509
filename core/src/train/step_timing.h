// A training step's figures from its timeline: the phase marks the step takes and the spans of
// the collectives it launched, all on the communicator's clock. Pure arithmetic, unit-tested
// (tests/unit/step_timing_test.cpp): what each StepMetrics time means is decided here alone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ddpd/common/training_result.h"
#include "ddpd/core/communicator.h"

namespace ddpd::detail {

// The step's marks, in seconds. Forward and backward alternate per micro-batch:
// micro_marks = {gathered, forward end 1, backward end 1, forward end 2, ...}.
struct StepMarks {
  double start = 0;     // before zero_grad
  double zeroed = 0;    // zero_grad done
  double gathered = 0;  // prepare_forward done (fsdp's gather of the first unit)
  std::vector<double> micro_marks;
  double synced = 0;           // the gradient synchronisation finished
  double optimizer_start = 0;  // after the memory measurement (the last step's)
  double end = 0;
  // Time spent measuring memory between `synced` and `optimizer_start`: not training.
  double measure_seconds = 0;
  // AdamW run bucket by bucket inside the synchronisation: optimizer time, not exposed comm.
  double overlapped_optimizer_seconds = 0;
  // ZeRO-1's broadcast of updated parameters inside the optimizer step: exposed comm.
  double broadcast_seconds = 0;
};

struct StepTiming {
  double step_seconds = 0;
  double forward_seconds = 0;
  double backward_seconds = 0;
  double optimizer_seconds = 0;
  double comm_seconds = 0;          // union of the collectives' spans within the step
  double exposed_comm_seconds = 0;  // gather + wait after backward - overlapped AdamW + broadcast
  int64_t gradient_sync_bytes = 0;  // of the step's all_reduce and reduce_scatter collectives
  // The phases (zero_grad, gather, forward/backward per micro-batch, wait, optimizer), as
  // (name, begin, end) on the same clock, in order; empty ones included.
  struct Phase {
    const char* name;
    double begin, end;
  };
  std::vector<Phase> phases;
};

StepTiming step_timing(const StepMarks& marks, const std::vector<CommSpan>& collectives);

// Writes `timing` into `metrics` (times, comm fraction, tokens per second for `global_tokens`)
// and the non-empty phases and the collectives as unix-time spans, through `to_unix`.
template <typename ToUnix>
void apply_step_timing(const StepTiming& timing, const std::vector<CommSpan>& collectives,
                       double global_tokens, ToUnix to_unix, StepMetrics& metrics) {
  metrics.step_seconds = timing.step_seconds;
  metrics.forward_seconds = timing.forward_seconds;
  metrics.backward_seconds = timing.backward_seconds;
  metrics.optimizer_seconds = timing.optimizer_seconds;
  metrics.comm_seconds = timing.comm_seconds;
  metrics.exposed_comm_seconds = timing.exposed_comm_seconds;
  metrics.gradient_sync_bytes = timing.gradient_sync_bytes;
  const bool timed = timing.step_seconds > 0;
  metrics.comm_fraction = timed ? timing.exposed_comm_seconds / timing.step_seconds : 0;
  metrics.tokens_per_second = timed ? global_tokens / timing.step_seconds : 0;
  metrics.spans.reserve(timing.phases.size() + collectives.size());
  for (const auto& p : timing.phases) {
    if (p.end > p.begin) metrics.spans.push_back({p.name, false, to_unix(p.begin), to_unix(p.end)});
  }
  for (const auto& c : collectives) {
    metrics.spans.push_back({c.name, true, to_unix(c.launch_s), to_unix(c.complete_s)});
  }
}

}  // namespace ddpd::detail
