// DDP training job: model, strategy, optimizer, data and per-step measurement (SPEC §3.2).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddpd/communicator.h"
#include "ddpd/job_options.h"

namespace ddpd {

// One interval of a step on one rank, for timelines. Times are unix seconds (see
// Communicator::unix_seconds) so that the ranks' tracks line up.
struct TraceSpan {
  std::string name;  // zero_grad, gather, forward, backward, wait, optimizer, or a collective's
  bool communication = false;  // a collective from launch to completion (else the step's thread)
  double begin_unix_s = 0;
  double end_unix_s = 0;
};

struct StepMetrics {
  int64_t step = 0;
  double loss = 0;  // mean over ranks
  double step_seconds = 0;
  double forward_seconds = 0;
  double backward_seconds = 0;
  double optimizer_seconds = 0;
  double comm_seconds = 0;             // union of collective spans within the step
  double exposed_comm_seconds = 0;     // time the step waited on communication outside backward
  double comm_fraction = 0;            // exposed_comm_seconds / step_seconds
  double tokens_per_second = 0;        // global tokens / step_seconds
  std::optional<double> param_spread;  // measured every spread_every steps
  // The step's phases (zero_grad, gather, forward, backward, wait, optimizer) and every
  // collective launched within it: a handful of records per step, from timestamps the step
  // reads anyway.
  std::vector<TraceSpan> spans;
};

struct MemoryBytes {
  int64_t param_bytes = 0;
  int64_t grad_bytes = 0;
  int64_t optimizer_state_bytes = 0;
  int64_t peak_bytes = 0;  // CUDA allocator peak, or the process's peak RSS on CPU
};

struct MemoryProfile {
  MemoryBytes after_init;
  MemoryBytes before_step;  // of the last step
  MemoryBytes after_step;   // of the last step
};

struct TrainingSummary {
  double final_loss = 0;
  double median_step_seconds = 0;
  double std_step_seconds = 0;
  double max_param_spread = 0;
  double tokens_per_second = 0;  // global tokens / median step time
  double median_comm_fraction = 0;
};

struct TrainingResult {
  std::vector<StepMetrics> steps;
  TrainingSummary summary;
  MemoryProfile memory;
};

// Summary over steps[warmup_steps:] (all steps when that leaves none).
TrainingSummary summarize(const std::vector<StepMetrics>& steps, int64_t warmup_steps);

// Thread contract: one thread drives a Trainer. The observer runs on that thread after each
// step; a cancellation check can be passed to run() and is polled between steps.
class Trainer {
 public:
  // Builds the model (seeded with seed + rank), the synchroniser (which broadcasts rank 0's
  // state) and the optimizer. Throws OptionError / std::runtime_error on bad input.
  Trainer(const DdpJobOptions& options, std::shared_ptr<Communicator> comm);
  ~Trainer();

  StepMetrics train_step(int64_t step);
  TrainingResult run(const std::function<void(const StepMetrics&)>& on_step = {},
                     const std::function<bool()>& cancelled = {});

  // The parameters every rank agrees on (fsdp gathers: a collective).
  std::vector<torch::Tensor> full_parameters();
  const MemoryProfile& memory() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddpd
