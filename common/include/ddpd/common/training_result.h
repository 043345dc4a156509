// What a DDP training job reports: per-step measurements, their summary and memory. Plain C++,
// shared by the training core that fills it, the worker daemon that streams it and the result
// JSON (docs/metrics.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

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
  double comm_seconds = 0;          // union of collective spans within the step
  double exposed_comm_seconds = 0;  // time the step waited on communication outside backward
  double comm_fraction = 0;         // exposed_comm_seconds / step_seconds
  double tokens_per_second = 0;     // global tokens / step_seconds
  // Bytes this rank put into the step's gradient all-reduces and reduce-scatters: what gradient
  // synchronisation moved (the trainable parameters' bytes for the replicated strategies).
  int64_t gradient_sync_bytes = 0;
  double checkpoint_seconds = 0;       // the stall of a checkpoint saved after this step (0: none)
  double lr = 0;                       // the learning rate the optimizer step used
  std::optional<double> grad_norm;     // global gradient norm before clipping (--clip-grad-norm)
  std::optional<double> param_spread;  // measured every spread_every steps
  std::optional<double> eval_loss;     // mean held-out loss over ranks, on --eval-every steps
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
  // Full (unsharded) parameters and gradients alive during the last step, at their peak, as the
  // strategy allocates them (not RSS): the whole model and its gradients for the replicated
  // strategies; for fsdp the units gathered and the full gradients (with their reduce-scatter
  // buffers) not yet sharded.
  int64_t step_peak_unsharded_bytes = 0;  // both at once
  int64_t step_peak_unsharded_parameter_bytes = 0;
  int64_t step_peak_unsharded_gradient_bytes = 0;
  int64_t step_peak_full_gradient_units = 0;  // fsdp: units with full gradients at once; else 1
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
  // The synchronisation that ran: the strategy's name, or "none" at world size 1.
  std::string synchronization;
  // The process group's transport: gloo, shm, nccl ("none" at world size 1), and why
  // --transport auto chose gloo ("" otherwise).
  std::string transport = "none";
  std::string transport_note;
  bool optimizer_sharding = false;  // ZeRO-1 ran (asked for, and more than one rank)
  int64_t micro_batches = 1;        // per optimizer step and rank (--grad-accum)
  // The dtype gradients travelled in: fp32, or fp16/bf16 under --grad-compression ("none" at
  // world size 1, where nothing travels).
  std::string gradient_wire_dtype = "fp32";
  std::vector<StepMetrics> steps;
  TrainingSummary summary;
  MemoryProfile memory;
};

// Summary over steps[warmup_steps:] (all steps when that leaves none).
TrainingSummary summarize(const std::vector<StepMetrics>& steps, int64_t warmup_steps);

}  // namespace ddpd
