// `ddpctl plan`: memory/communication accounting (docs/planning.md) and the bucket advisor. Pure
// arithmetic; every figure is in bytes, seconds, FLOP/s or bytes/s.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ddpd/common/job_options.h"
#include "ddpd/common/memory_estimate.h"

namespace ddpd::plan {

// An FFN-only model of `blocks` blocks of two linears d_model→d_ff→d_model, no biases.
// Defaults: the reference config "XXL".
struct FfnModel {
  int64_t d_model = 16384;
  int64_t d_ff = 53248;
  int64_t blocks = 126;
  int64_t parameters() const { return blocks * 2 * d_model * d_ff; }
};

struct MemoryPlan {
  double weights_bytes = 0;      // FP32 master weights: 4 P
  double gradients_bytes = 0;    // FP32 accumulated gradients: 4 P
  double optimizer_bytes = 0;    // AdamW first and second moments in FP32: 8 P
  double state_bytes = 0;        // the three above: 16 P
  double activation_bytes = 0;   // BF16 inputs of both linears per token per block, for backward
  double devices_for_state = 0;  // ceil(state / device memory)
};

// activation_tokens: tokens whose activations are held (per device batch × context).
MemoryPlan memory_plan(const FfnModel& model, double activation_tokens, double device_bytes);

// Per-device bytes under N-way FSDP where weights, gradients, optimizer state and half the
// activations (every second layer's) are sharded: (16P + A/2) / N + A/2.
double fsdp_bytes_per_device(const MemoryPlan& plan, int64_t n);
// The smallest N with fsdp_bytes_per_device ≤ device_bytes; 0 when even N → ∞ does not fit
// (the replicated half of the activations alone is too large).
int64_t smallest_fsdp_degree(const MemoryPlan& plan, double device_bytes);

// Forward pass on an X-way FSDP × Y-way TP mesh (TPU Scaling Book notation): compute
// 4·B·D·F/(N·C) against FSDP's 4·D·F/(Y·W·M_X) and TP's 4·B·D/(X·W·M_Y). Compute-bound from a
// per-device batch of C/(W·M_X·Y) tokens, provided Y ≤ F·W·M_Y/C (else TP never is).
struct MeshPlan {
  double min_batch_per_device = 0;  // tokens
  double min_total_batch = 0;       // tokens, × X·Y devices
  double max_tp_degree = 0;         // F·W·M_Y / C
  bool tp_compute_bound = false;
};
MeshPlan mesh_plan(const FfnModel& model, int64_t x, int64_t y, double flops_per_s,
                   double bandwidth_bytes_per_s, double m_x, double m_y);

// Bucket advisor: with s gradient bytes, all-reduce bandwidth w (β) and per-call overhead o
// (α), and compute per bucket equal to its communication, the overhead after backward with
// n_b buckets is s/(n_b·w) + n_b·o; best at n_b = sqrt(s/(w·o)), a bucket of sqrt(s·w·o).
double recommended_bucket_bytes(double gradient_bytes, double bandwidth, double overhead_s);
double predicted_overhead_s(double gradient_bytes, double bandwidth, double overhead_s,
                            double bucket_bytes);

// The Transformer LM ddpd trains, as FSDP's units see it (docs/fsdp.md): the embedding, each
// block (two RMSNorm gains, q/k/v/o, the SwiGLU FFN), the final norm with the LM head.
struct TransformerShape {
  int64_t d_model = 256;
  int64_t d_ff = 1024;
  int64_t layers = 8;
  int64_t vocab = 10000;
  bool tied = false;
  // Attention's shape counts only with grouped-query attention, a head width other than
  // d_model / heads, or q/k/v biases (an imported model: --init-from); 0: multi-head attention.
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  bool qkv_bias = false;

  // The job model's view of this shape, whose block_parameter_count() the block counts.
  ModelConfig config() const;
  int64_t block_parameters() const { return block_parameter_count(config()); }
  int64_t embedding_parameters() const { return vocab * d_model; }
  int64_t head_parameters() const { return (tied ? 0 : vocab * d_model) + d_model; }
  int64_t parameters() const {
    return embedding_parameters() + layers * block_parameters() + head_parameters();
  }
};

// One strategy's per-rank bytes during a step, fp32, padding ignored. Full parameters and full
// gradients alive at their peaks (gradients with the reduce-scatter's receive buffer, which is
// as large as the gradient it exchanges), and the optimizer state (AdamW's two moments).
struct StrategyMemory {
  std::string strategy;
  double peak_parameter_bytes = 0;
  double peak_gradient_bytes = 0;
  double optimizer_bytes = 0;
};
// bucketed, bucketed+zero1, fsdp-whole, fsdp-block (prefetch units ahead), fsdp-block-keep;
// `gloo`: the reduce-scatter's chunk buffers (world > 2), none over shm.
std::vector<StrategyMemory> strategy_memory(const TransformerShape& model, int64_t world,
                                            int64_t prefetch, bool gloo);

// Each rank's predicted peak (memory_estimate.h) for one way to run the job.
struct PeakRow {
  std::string strategy;  // naive, flat, overlap, bucketed, bucketed+zero1, fsdp
  int64_t shard_replicas = 0;
  ActivationCheckpointing checkpointing = ActivationCheckpointing::kNone;
  RankMemoryEstimate estimate;
};
// Every strategy (± ZeRO-1, ± --shard-replicas 1 where it shards) under each
// --activation-checkpointing, for `job`'s shape, batch and context at `world` ranks; `shm`: the
// ranks share a host (bucketed's buckets are shared segments).
std::vector<PeakRow> peak_memory(const DdpJobOptions& job, int world, bool shm);

}  // namespace ddpd::plan
