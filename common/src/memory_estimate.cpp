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

namespace {

// The job's arithmetic, in elements (docs in memory_estimate.h).
struct Shape {
  double d = 0, f = 0, vocab = 0, layers = 0, heads = 0, q = 0;
  double block = 0, head_unit = 0, embedding = 0, parameters = 0, largest = 0;
  double rows = 0, t = 0, tokens = 0;  // one micro-batch of this rank's share
  bool naive = false;
};

Shape shape_of(const DdpJobOptions& options, int world_size) {
  const ModelConfig c = options.resolved_model();
  Shape s;
  s.d = static_cast<double>(c.d_model);
  s.f = static_cast<double>(c.d_ff);
  s.vocab = static_cast<double>(c.vocab_size);
  s.layers = static_cast<double>(c.num_layers);
  s.heads = static_cast<double>(c.num_heads);
  s.q = s.heads * static_cast<double>(c.resolved_head_dim());
  s.block = static_cast<double>(block_parameter_count(c));
  s.embedding = s.vocab * s.d;
  s.head_unit = s.vocab * s.d + s.d;  // the final norm and the head (tied: the embedding's)
  s.parameters = s.embedding + s.layers * s.block + (c.tie_embeddings ? 0 : s.vocab * s.d) + s.d;
  s.largest = std::max(s.embedding, s.vocab * s.d);
  s.rows = static_cast<double>(options.batch_size) / std::max(1, world_size) /
           static_cast<double>(std::max<int64_t>(1, options.grad_accum));
  s.t = static_cast<double>(options.context_length);
  s.tokens = s.rows * s.t;
  s.naive = options.resolved_attention() == Attention::kNaive;
  return s;
}

// The attention core's saved tensors, per block: naive's probabilities, else the fused
// kernel's output and log-sum-exp.
double attention_core(const Shape& s) {
  return s.naive ? s.rows * s.heads * s.t * s.t : s.tokens * (s.q + s.heads);
}

// Elements forward saves for backward over all blocks and the edges (not the loss).
double saved_activations(const Shape& s, ActivationCheckpointing ac) {
  const double edges = 3 * s.tokens * s.d;
  if (ac == ActivationCheckpointing::kBlock) return s.layers * s.tokens * s.d + edges;
  const double per_block = s.tokens * (6 * s.d + 4 * s.q + 4 * s.f) +
                           (ac == ActivationCheckpointing::kNone ? attention_core(s) : 0.0);
  return s.layers * per_block + edges;
}

// What a block's backward adds: its recomputed tensors and its gradients' chain.
double block_backward(const Shape& s, ActivationCheckpointing ac) {
  const double chain =
      std::max(3 * s.tokens * s.f, s.naive ? 2 * s.rows * s.heads * s.t * s.t : 0.0) +
      2 * s.tokens * s.d;
  const double recomputed =
      ac == ActivationCheckpointing::kBlock
          ? s.tokens * (6 * s.d + 4 * s.q + 4 * s.f) + attention_core(s)
          : (ac == ActivationCheckpointing::kSelective ? attention_core(s) : 0.0);
  return chain + recomputed + s.tokens * s.d;  // and the head's gradient into the final norm
}

// One instant of the step, in elements; the estimate is the largest.
struct Instant {
  const char* phase;
  double weights, gradients, activations;
};

RankMemoryEstimate at(const Instant& i, double optimizer, double shared) {
  RankMemoryEstimate e;
  e.parameter_bytes = saturate(4 * i.weights);
  e.gradient_bytes = saturate(4 * i.gradients);
  e.optimizer_bytes = saturate(4 * optimizer);
  e.activation_bytes = saturate(4 * i.activations);
  e.shared_bytes = saturate(4 * shared);
  e.phase = i.phase;
  return e;
}

}  // namespace

RankMemoryEstimate estimate_rank_memory(const DdpJobOptions& options, int world_size, bool shm) {
  const Shape s = shape_of(options, world_size);
  const double n = std::max(1, world_size), p = s.parameters;
  const ActivationCheckpointing ac = options.activation_checkpointing;
  const double saved = saved_activations(s, ac), loss = 3 * s.tokens * s.vocab;
  const double backward = block_backward(s, ac);
  const bool fsdp = options.strategy == Strategy::kFsdp && world_size > 1;
  const bool replicated = world_size > 1 && !fsdp;
  // --shard-replicas 1: the ring predecessor's shards too.
  const double shards = (1.0 + options.shard_replicas) / n;
  const double optimizer = 2 * p * (fsdp || (replicated && options.shard_optimizer) ? shards : 1.0);
  // Gradients that outlive zero_grad: bucketed's buckets (shared over shm), fsdp's shards;
  // under accumulation the micro-batches' sum (fresh tensors, or fsdp's full units).
  const bool buckets = replicated && options.strategy == Strategy::kBucketed;
  const double kept = (buckets && !shm ? p : 0.0) + (fsdp ? p / n : 0.0) +
                      (options.grad_accum > 1 && !buckets ? p : 0.0);
  std::vector<Instant> instants;
  if (fsdp) {
    const double weights = p * shards;
    const double all = options.reshard_after_forward ? 0.0 : p;
    const double units = 1 + static_cast<double>(options.fsdp_prefetch);
    const double ahead = static_cast<double>(options.fsdp_prefetch) * s.block;
    // --shard-replicas 1: the predecessor's gradient shards, from the first reduce-scatter on.
    const double reduced = kept + p * static_cast<double>(options.shard_replicas) / n;
    // Two units' full gradients (docs/fsdp.md "The two-unit bound"); over Gloo beyond world 2
    // each unit in flight also receives through one chunk of unit / N (3.4 MiB of the bench's
    // model at world 4), none over shm.
    const double c = !shm && world_size > 2 ? 1 + 1 / n : 1.0;
    instants = {{"loss backward", weights + std::max(all, s.head_unit), kept, saved + loss},
                // The head's backward: its full gradient and the next block's, the block
                // prefetched, the logits' gradient and the log-softmax's still alive.
                {"head backward", weights + std::max(all, s.head_unit + ahead),
                 reduced + c * (s.head_unit + s.block), saved + 2 * s.tokens * s.vocab},
                {"block backward", weights + std::max(all, units * s.block),
                 reduced + c * (s.head_unit + s.block), saved + backward},
                {"gradients", weights + std::max(all, s.embedding),
                 reduced + c * (s.embedding + s.block), s.tokens * s.d}};
  } else {
    const double fresh = buckets ? 0.0 : s.head_unit;  // the head's gradient, made in backward
    const double flat = replicated && options.strategy == Strategy::kFlat ? p : 0.0;
    instants = {
        {"loss backward", p, kept, saved + loss},
        {"head backward", p, kept + fresh, saved + s.tokens * s.vocab},
        {"block backward", p, kept + fresh, saved + backward},
        {"gradients", p, (buckets ? (shm ? 0.0 : p) + s.largest : p) + flat, s.tokens * s.d}};
  }
  const double shared = buckets && shm ? p : 0.0;
  RankMemoryEstimate best;
  double best_total = -1;
  for (const Instant& instant : instants) {
    const double total = instant.weights + instant.gradients + instant.activations;
    if (total > best_total) {
      best_total = total;
      best = at(instant, optimizer, shared);
    }
  }
  return best;
}

std::string describe(const RankMemoryEstimate& e) {
  std::ostringstream out;
  const double total = static_cast<double>(e.parameter_bytes) + e.gradient_bytes +
                       e.optimizer_bytes + e.activation_bytes +
                       e.shared_bytes;  // saturated parts: no overflow
  out << "needs about " << gigabytes(total) << " GB per rank at its peak (weights "
      << gigabytes(e.parameter_bytes) << ", gradients "
      << gigabytes(static_cast<double>(e.gradient_bytes) + e.shared_bytes) << ", optimizer state "
      << gigabytes(e.optimizer_bytes) << ", activations " << gigabytes(e.activation_bytes)
      << " GB)";
  return out.str();
}

namespace {

double total_of(const DdpJobOptions& options, int world_size) {
  const RankMemoryEstimate e = estimate_rank_memory(options, world_size);
  return static_cast<double>(e.parameter_bytes) + e.gradient_bytes + e.optimizer_bytes +
         e.activation_bytes + e.shared_bytes;
}

// The largest global batch below the job's, a multiple of world × --grad-accum, that fits; 0
// when none does. The peak grows with the batch, so a bisection over the multiples finds it.
int64_t largest_fitting_batch(const DdpJobOptions& options, int world_size, double available) {
  const int64_t step = std::max<int64_t>(1, world_size) * std::max<int64_t>(1, options.grad_accum);
  int64_t low = 0, high = options.batch_size / step - 1;  // in multiples of step
  DdpJobOptions smaller = options;
  while (low < high) {
    const int64_t mid = (low + high + 1) / 2;
    smaller.batch_size = mid * step;
    if (total_of(smaller, world_size) <= available) {
      low = mid;
    } else {
      high = mid - 1;
    }
  }
  smaller.batch_size = low * step;
  return low > 0 && total_of(smaller, world_size) <= available ? low * step : 0;
}

}  // namespace

std::vector<MemoryRemedy> memory_remedies(const DdpJobOptions& options, int world_size,
                                          int64_t available_bytes) {
  std::vector<MemoryRemedy> out;
  const double available = static_cast<double>(available_bytes);
  auto consider = [&](DdpJobOptions changed, const char* flag, const std::string& value) {
    const double total = total_of(changed, world_size);
    if (total <= available) out.push_back({flag, value, saturate(total)});
  };
  if (options.strategy != Strategy::kFsdp && world_size > 1) {
    DdpJobOptions fsdp = options;
    fsdp.strategy = Strategy::kFsdp;
    fsdp.shard_optimizer = false;  // fsdp shards the moments itself
    consider(fsdp, "--strategy", "fsdp");
  }
  if (options.activation_checkpointing != ActivationCheckpointing::kBlock) {
    DdpJobOptions block = options;
    block.activation_checkpointing = ActivationCheckpointing::kBlock;
    consider(block, "--activation-checkpointing", "block");
  }
  if (const int64_t batch = largest_fitting_batch(options, world_size, available)) {
    DdpJobOptions smaller = options;
    smaller.batch_size = batch;
    consider(smaller, "--batch", std::to_string(batch));
  }
  return out;
}

void check_fits_in_memory(const DdpJobOptions& options, int world_size, int64_t available_bytes,
                          const std::string& where) {
  if (available_bytes <= 0) return;
  const RankMemoryEstimate e = estimate_rank_memory(options, world_size);
  if (total_of(options, world_size) <= static_cast<double>(available_bytes)) return;
  const std::vector<MemoryRemedy> remedies = memory_remedies(options, world_size, available_bytes);
  std::string fits;
  for (size_t i = 0; i < remedies.size(); ++i) {
    fits += (i == 0                     ? ""
             : i + 1 == remedies.size() ? " or "
                                        : ", ") +
            remedies[i].flag + " " + remedies[i].value + " (" +
            gigabytes(static_cast<double>(remedies[i].total_bytes)) + " GB)";
  }
  throw OptionError(
      remedies.empty() ? largest_memory_cause(options, world_size) : remedies.front().flag,
      "the job " + describe(e) + ", more than " + where + " (" +
          gigabytes(static_cast<double>(available_bytes)) + " GB); " +
          (fits.empty() ? "no single flag of --strategy fsdp, "
                          "--activation-checkpointing block or a smaller --batch "
                          "makes it fit"
                        : "it fits with " + fits));
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
                            ? layers * static_cast<double>(c.num_heads) * t * t
                            : 0.0;
  const double q = static_cast<double>(c.num_heads * c.resolved_head_dim());
  const double per_token_blocks = layers * t * (6 * d + 4 * q + 4 * static_cast<double>(c.d_ff));
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
