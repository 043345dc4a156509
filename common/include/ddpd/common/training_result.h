// What a DDP training job reports: per-step measurements, their summary and memory. Plain C++,
// shared by the training core that fills it, the worker daemon that streams it and the result
// JSON (docs/metrics.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ddpd/common/job_options.h"
#include "ddpd/common/shared_buffer_fallback.h"

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
  // This rank's rows of the global sample order (docs/data.md): [first_sample, first_sample +
  // samples). What a sample ledger checks across ranks, world sizes and heals.
  int64_t first_sample = 0;
  int64_t samples = 0;
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
  // Live CPU tensor bytes at their highest during the last step, every tensor of the process
  // (weights, gradients, optimizer state, activations, collectives' buffers), counted by the
  // allocator (core/src/device/counting_allocator.h): what `ddpctl plan memory` predicts.
  int64_t step_peak_tensor_bytes = 0;
  // Activations at their highest during the last step (docs/metrics.md#memory): the allocator's
  // live bytes over each micro-batch's forward above where they stood when it began, less the
  // units fsdp gathered meanwhile; under --activation-checkpointing the forward's end plus the
  // most one recompute added in backward. 0 where the count is off (no Trainer).
  int64_t step_peak_activation_bytes = 0;
  // How far the rank process's resident memory rose while its model was built, its weights
  // imported (--init-from) or resumed, and its synchroniser built, at the highest: fsdp's import
  // keeps it near the rank's share of the model plus one tensor. -1: not measurable here.
  int64_t loading_peak_rss_rise_bytes = -1;
};

struct TrainingSummary {
  // The last step's loss; none when no step ran (a 0 would read as a perfect loss).
  std::optional<double> final_loss;
  double median_step_seconds = 0;
  double std_step_seconds = 0;
  double max_param_spread = 0;
  double tokens_per_second = 0;  // global tokens / median step time
  double median_comm_fraction = 0;
};

// One measured step's timeline, kept so that a job that has ended can be replayed with another
// bucket schedule, strategy or world size (`ddpctl whatif`, docs/whatif.md). Times are seconds
// from the step's start on the rank's clock.
struct ProfiledCollective {
  std::string name;  // all_reduce/bucket3, broadcast/owner1, ... (the journal's names)
  Collective op = Collective::kAllReduce;  // the name's first part
  int64_t bytes = 0;
  double launch_s = 0;
  double complete_s = 0;
};

struct ProfiledStep {
  int64_t step = 0;
  double step_s = 0;
  double zero_grad_s = 0;
  double forward_s = 0;   // every micro-batch's
  double backward_s = 0;  // every micro-batch's
  double last_backward_start_s = 0;
  double last_backward_end_s = 0;
  double synced_s = 0;                // the gradient synchronisation finished
  double optimizer_s = 0;             // after synced, plus AdamW run per bucket inside the sync
  double overlapped_optimizer_s = 0;  // the part of optimizer_s run inside the sync
  // Each gradient's ready time in the last backward (index as StepProfile::gradients), seconds
  // since that backward started; negative when it never became ready.
  std::vector<double> ready_s;
  std::vector<ProfiledCollective> collectives;  // launched within the step, in launch order
};

struct GradientInfo {
  std::string name;  // the parameter's name in the model (blocks.2.attn.qkv.weight)
  int64_t bytes = 0;
};

struct StepProfile {
  int host_cores = 0;  // hardware threads of the rank's host
  // Trainable parameters, unique, in registration order. Empty when the strategy's gradients
  // are not whole per parameter (fsdp), or the device times on another clock (CUDA).
  std::vector<GradientInfo> gradients;
  std::vector<ProfiledStep> steps;  // the last kProfiledSteps measured steps, oldest first
};
constexpr size_t kProfiledSteps = 8;

// A group generation formed in place of one that lost a rank, and the state its ranks took
// (docs/healing.md).
struct HealRecord {
  int generation = 0;           // 1, 2, …
  int lost_rank = -1;           // the rank the failure named; -1: none named
  int source_rank = -1;         // whose state every rank took
  int64_t resumed_step = 0;     // the first step of the new generation
  int64_t state_bytes = 0;      // broadcast from the source
  double regroup_seconds = 0;   // from the failure to the new group
  double transfer_seconds = 0;  // the state's broadcast
  int world_size = 0;           // the new generation's ranks: fewer than before where it shrank
};

struct TrainingResult {
  // The synchronisation that ran: the strategy's name, or "none" at world size 1.
  std::string synchronization;
  // The process group's transport: gloo, shm, nccl ("none" at world size 1), and why
  // --transport auto chose gloo ("" otherwise).
  GroupTransport transport = GroupTransport::kNone;
  std::string transport_note;
  // Why bucketed's gradient buffers fell back to private memory over shm (none otherwise).
  std::optional<SharedBufferFallback> shared_buffers_fallback;
  bool optimizer_sharding = false;  // ZeRO-1 ran (asked for, and more than one rank)
  int64_t micro_batches = 1;        // per optimizer step and rank (--grad-accum)
  // The dtype gradients travelled in: fp32, or fp16/bf16 under --grad-compression ("none" at
  // world size 1, where nothing travels).
  std::string gradient_wire_dtype = "fp32";
  std::vector<StepMetrics> steps;
  // --steps 0 with --eval-data: the held-out loss of the model as it starts (no step ran).
  std::optional<double> initial_eval_loss;
  TrainingSummary summary;
  MemoryProfile memory;
  StepProfile profile;  // rank 0's
  std::vector<HealRecord> heals;
};

// Summary over steps[warmup_steps:] (all steps when that leaves none).
TrainingSummary summarize(const std::vector<StepMetrics>& steps, int64_t warmup_steps);

}  // namespace ddpd
