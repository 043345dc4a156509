#include "ddpd/common/memory_estimate.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

namespace ddpd {
namespace {

constexpr double kMax = static_cast<double>(std::numeric_limits<int64_t>::max());

int64_t saturate(double bytes) {
  return bytes >= kMax ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(bytes);
}

std::string gigabytes(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", bytes / 1e9);
  return text;
}

}  // namespace

RankMemoryEstimate estimate_rank_memory(const DdpJobOptions& options, int world_size) {
  const ModelConfig c = options.resolved_model();
  const double n = std::max(1, world_size);
  const double d = static_cast<double>(c.d_model), ff = static_cast<double>(c.d_ff);
  const double vocab = static_cast<double>(c.vocab_size);
  const double layers = static_cast<double>(c.num_layers);
  const double block = static_cast<double>(block_parameter_count(c));
  const double embedding = vocab * d;
  const double head = (c.tie_embeddings ? 0 : vocab * d) + d;
  const double parameters = embedding + layers * block + head;

  RankMemoryEstimate e;
  const bool fsdp = options.strategy == Strategy::kFsdp && world_size > 1;
  if (fsdp) {
    // Units gathered at once: prefetch + 1 blocks and the larger edge unit (docs/fsdp.md).
    const double units =
        (1 + static_cast<double>(options.fsdp_prefetch)) * block + std::max(embedding, head);
    const double gathered =
        options.reshard_after_forward ? std::min(units, parameters) : parameters;
    // --shard-replicas 1: the ring predecessor's shard of parameters, gradients and moments too.
    const double shards = (1.0 + options.shard_replicas) / n;
    e.parameter_bytes = saturate(4 * (parameters * shards + gathered));
    e.gradient_bytes =
        saturate(4 * (parameters * shards +
                      std::min(2 * parameters, 4 * std::max(block, std::max(embedding, head)))));
    e.optimizer_bytes = saturate(8 * parameters * shards);
  } else {
    e.parameter_bytes = saturate(4 * parameters);
    e.gradient_bytes = saturate(4 * parameters);
    // --shard-replicas 1: the ring predecessor's shard of moments too.
    const double shards = options.shard_optimizer && n > 1 ? (1.0 + options.shard_replicas) / n : 1;
    e.optimizer_bytes = saturate(8 * parameters * shards);
  }
  // One micro-batch of this rank's share of the global batch.
  const double rows = static_cast<double>(options.batch_size) / n /
                      static_cast<double>(std::max<int64_t>(1, options.grad_accum));
  const double t = static_cast<double>(options.context_length);
  const double tokens = rows * t;
  const double heads = static_cast<double>(c.num_heads);
  // Per block and token: the inputs of both norms, q/k/v/o and the three FFN linears, RoPE'd
  // q and k, the SwiGLU's intermediate products (about 12 d + 4 d_ff floats); per block and
  // sequence, scores and probabilities (2 · h · t²) with naive attention.
  const double per_block =
      tokens * (12 * d + 4 * ff) +
      (options.resolved_attention() == Attention::kNaive ? rows * heads * t * t * 2 : 0.0);
  const double logits = tokens * vocab * 3;  // logits, their fp32 copy, their gradient
  e.activation_bytes = saturate(4 * (layers * per_block + logits + tokens * d));
  return e;
}

std::string describe(const RankMemoryEstimate& e) {
  std::ostringstream out;
  const double total = static_cast<double>(e.parameter_bytes) + e.gradient_bytes +
                       e.optimizer_bytes + e.activation_bytes;  // saturated parts: no overflow
  out << "needs about " << gigabytes(total) << " GB per rank (parameters "
      << gigabytes(e.parameter_bytes) << ", gradients " << gigabytes(e.gradient_bytes)
      << ", optimizer state " << gigabytes(e.optimizer_bytes) << ", activations "
      << gigabytes(e.activation_bytes) << " GB)";
  return out.str();
}

void check_fits_in_memory(const DdpJobOptions& options, int world_size, int64_t available_bytes,
                          const std::string& where) {
  if (available_bytes <= 0) return;
  const RankMemoryEstimate e = estimate_rank_memory(options, world_size);
  // total() of saturated parts could overflow: compare in double.
  const double total = static_cast<double>(e.parameter_bytes) + e.gradient_bytes +
                       e.optimizer_bytes + e.activation_bytes;
  if (total <= static_cast<double>(available_bytes)) return;
  const bool activations = e.activation_bytes >= e.parameter_bytes + e.optimizer_bytes;
  throw OptionError(largest_memory_cause(options, world_size),
                    "the job " + describe(e) + ", more than " + where + " (" +
                        gigabytes(static_cast<double>(available_bytes)) + " GB)" +
                        (activations ? "; activations also shrink with a smaller --batch or "
                                       "more --grad-accum"
                                     : ""));
}

std::string largest_memory_cause(const DdpJobOptions& options, int world_size) {
  const RankMemoryEstimate e = estimate_rank_memory(options, world_size);
  const ModelConfig c = options.resolved_model();
  const double d = static_cast<double>(c.d_model), vocab = static_cast<double>(c.vocab_size);
  const double layers = static_cast<double>(c.num_layers);
  const double block = static_cast<double>(block_parameter_count(c));
  if (e.activation_bytes < e.parameter_bytes + e.optimizer_bytes) {
    // Parameters: the vocabulary's embedding and head, or the blocks (width and depth).
    if (vocab * d * 2 > layers * block) return "--vocab";
    if (options.d_model) return "--d-model";
    if (options.num_layers) return "--layers";
    return "--model";
  }
  // Activations, per micro-batch: attention's scores (b·h·t², naive attention), the logits
  // (tokens · vocab), or the blocks' per-token tensors, which only a smaller batch shrinks.
  const double t = static_cast<double>(options.context_length);
  const double scores = options.resolved_attention() == Attention::kNaive
                            ? layers * static_cast<double>(c.num_heads) * t * t * 2
                            : 0.0;
  const double per_token_blocks = layers * t * (12 * d + 4 * static_cast<double>(c.d_ff));
  const double logits = t * vocab * 3;
  if (scores >= logits && scores >= per_token_blocks) return "--context";
  if (logits >= per_token_blocks) return "--vocab";
  return "--batch";
}

int64_t available_memory_bytes() {
  int64_t available = 0;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") {
      available = kib * 1024;
      break;
    }
  }
  // In a container (cgroup v2) the limit may be far below the host's memory: what is left of it.
  std::ifstream max_file("/sys/fs/cgroup/memory.max"),
      current_file("/sys/fs/cgroup/memory.current");
  std::string max;
  int64_t current = 0;
  if (max_file >> max && max != "max" && current_file >> current) {
    const int64_t left = std::max<int64_t>(0, std::stoll(max) - current);
    available = available > 0 ? std::min(available, left) : left;
  }
  return available;
}

}  // namespace ddpd
