#include "plan.h"

#include <algorithm>
#include <cmath>

namespace ddpd::plan {

MemoryPlan memory_plan(const FfnModel& model, double activation_tokens, double device_bytes) {
  const double p = static_cast<double>(model.parameters());
  MemoryPlan plan;
  plan.weights_bytes = 4 * p;
  plan.gradients_bytes = 4 * p;
  plan.optimizer_bytes = 8 * p;
  plan.state_bytes = 16 * p;
  plan.activation_bytes =
      activation_tokens * model.blocks * 2.0 * static_cast<double>(model.d_model + model.d_ff);
  plan.devices_for_state = std::ceil(plan.state_bytes / device_bytes);
  return plan;
}

double fsdp_bytes_per_device(const MemoryPlan& plan, int64_t n) {
  return (plan.state_bytes + plan.activation_bytes / 2) / static_cast<double>(n) +
         plan.activation_bytes / 2;
}

int64_t smallest_fsdp_degree(const MemoryPlan& plan, double device_bytes) {
  const double room = device_bytes - plan.activation_bytes / 2;
  if (room <= 0) return 0;
  return static_cast<int64_t>(std::ceil((plan.state_bytes + plan.activation_bytes / 2) / room));
}

MeshPlan mesh_plan(const FfnModel& model, int64_t x, int64_t y, double flops_per_s,
                   double bandwidth, double m_x, double m_y) {
  MeshPlan plan;
  plan.min_batch_per_device = flops_per_s / (bandwidth * m_x * static_cast<double>(y));
  plan.min_total_batch = plan.min_batch_per_device * static_cast<double>(x * y);
  plan.max_tp_degree = static_cast<double>(model.d_ff) * bandwidth * m_y / flops_per_s;
  plan.tp_compute_bound = static_cast<double>(y) <= plan.max_tp_degree;
  return plan;
}

double recommended_bucket_bytes(double gradient_bytes, double bandwidth, double overhead_s) {
  return std::sqrt(gradient_bytes * bandwidth * overhead_s);
}

double predicted_overhead_s(double gradient_bytes, double bandwidth, double overhead_s,
                            double bucket_bytes) {
  const double buckets = std::max(1.0, std::ceil(gradient_bytes / bucket_bytes));
  return gradient_bytes / (buckets * bandwidth) + buckets * overhead_s;
}

ModelConfig TransformerShape::config() const {
  ModelConfig c;
  c.d_model = d_model;
  c.d_ff = d_ff;
  c.num_layers = layers;
  c.vocab_size = vocab;
  c.tie_embeddings = tied;
  c.num_heads = heads > 0 ? heads : 1;  // one head of width d_model: the same q/k/v/o counts
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.qkv_bias = qkv_bias;
  return c;
}

std::vector<StrategyMemory> strategy_memory(const TransformerShape& model, int64_t world,
                                            int64_t prefetch, bool gloo) {
  const double p = 4.0 * static_cast<double>(model.parameters());
  const double block = 4.0 * static_cast<double>(model.block_parameters());
  const double embedding = 4.0 * static_cast<double>(model.embedding_parameters());
  const double head = 4.0 * static_cast<double>(model.head_parameters());
  const double n = static_cast<double>(world);
  // Per block: the unit computing and `prefetch` ahead; the embedding with the first blocks
  // ahead of it in forward, the head with the last ones in backward. Tied, the embedding unit
  // (with the head) stays gathered the whole step.
  const double k = static_cast<double>(prefetch);
  const double edge = model.tied ? embedding + head : std::max(embedding, head);
  const double block_params = std::min(
      p, model.tied ? edge + (1 + k) * block : std::max(edge + k * block, (1 + k) * block));
  // Full gradients (docs/fsdp.md "The two-unit bound"): the unit in backward and the one before
  // it, whose reduce-scatter may still run into the shard; the head's first, the embedding's
  // last. Tied, the embedding unit's gradient lives through the whole backward. Over Gloo beyond
  // world 2 each unit in flight also receives through one chunk (unit / N); over shm, none.
  const double c = gloo && world > 2 ? 1 + 1 / n : 1.0;  // a unit in flight, with its chunk
  double block_grads = c * std::max({head + block, 2 * block, block + embedding});
  // Tied: the unit's own reduce-scatter starts after backward, with block 0's maybe in flight.
  if (model.tied) block_grads = std::max(edge + 2 * block * c, (edge + block) * c);
  block_grads = std::min(block_grads, p * c);
  return {{"bucketed", p, p, 2 * p},
          {"bucketed+zero1", p, p, 2 * p / n},
          {"fsdp-whole", p, p * c, 2 * p / n},
          {"fsdp-block", block_params, block_grads, 2 * p / n},
          {"fsdp-block-keep", p, block_grads, 2 * p / n}};
}

std::vector<PeakRow> peak_memory(const DdpJobOptions& job, int world, bool shm) {
  struct Way {
    const char* name;
    Strategy strategy;
    bool zero1;
    int64_t replicas;
  };
  const Way ways[] = {{"naive", Strategy::kNaive, false, 0},
                      {"flat", Strategy::kFlat, false, 0},
                      {"overlap", Strategy::kOverlap, false, 0},
                      {"bucketed", Strategy::kBucketed, false, 0},
                      {"bucketed+zero1", Strategy::kBucketed, true, 0},
                      {"bucketed+zero1", Strategy::kBucketed, true, 1},
                      {"fsdp", Strategy::kFsdp, false, 0},
                      {"fsdp", Strategy::kFsdp, false, 1}};
  std::vector<PeakRow> rows;
  for (const Way& way : ways) {
    for (const auto ac : {ActivationCheckpointing::kNone, ActivationCheckpointing::kSelective,
                          ActivationCheckpointing::kBlock}) {
      DdpJobOptions o = job;
      o.strategy = way.strategy;
      o.shard_optimizer = way.zero1;
      o.shard_replicas = way.replicas;
      o.activation_checkpointing = ac;
      rows.push_back({way.name, way.replicas, ac, estimate_rank_memory(o, world, shm)});
    }
  }
  return rows;
}

}  // namespace ddpd::plan
