#include "ddpd/common/job_options.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "ddpd/common/fault_injection.h"
#include "ddpd/common/hf_config.h"
#include "ddpd/common/job_option_table.h"
#include "enum_names_define.h"

namespace ddpd {
namespace {

std::string join(const std::vector<std::string>& names) {
  std::ostringstream out;
  for (size_t i = 0; i < names.size(); ++i) out << (i ? ", " : "") << names[i];
  return out.str();
}

ModelConfig shape(int64_t d_model, int64_t d_ff, int64_t layers, int64_t heads) {
  ModelConfig config;
  config.d_model = d_model;
  config.d_ff = d_ff;
  config.num_layers = layers;
  config.num_heads = heads;
  return config;
}

// The model presets, smallest first; vocab 10000 in all of them.
const std::map<std::string, ModelConfig>& presets() {
  static const std::map<std::string, ModelConfig> table = {
      {"tiny", shape(64, 256, 2, 4)},        {"small", shape(768, 3072, 12, 12)},
      {"medium", shape(1024, 4096, 24, 16)}, {"large", shape(1280, 5120, 36, 20)},
      {"xl", shape(1600, 6400, 48, 25)},     {"2.7B", shape(2560, 10240, 32, 32)},
  };
  return table;
}

}  // namespace

void require(bool ok, const std::string& flag, const std::string& reason) {
  if (!ok) throw OptionError(flag, reason);
}

const std::vector<std::string>& model_preset_names() {
  static const std::vector<std::string> names = {"tiny", "small", "medium", "large", "xl", "2.7B"};
  return names;
}

ModelConfig model_preset(const std::string& name) {
  auto it = presets().find(name);
  if (it == presets().end()) {
    throw OptionError("--model", "unknown model '" + name + "' (expected one of " +
                                     join(model_preset_names()) + ")");
  }
  return it->second;
}

int64_t block_parameter_count(const ModelConfig& c) {
  const int64_t q_width = c.num_heads * c.resolved_head_dim();
  const int64_t kv_width = c.kv_heads() * c.resolved_head_dim();
  const int64_t attention = 2 * c.d_model * q_width     // q, o
                            + 2 * c.d_model * kv_width  // k, v
                            + (c.qkv_bias ? q_width + 2 * kv_width : 0);
  return 2 * c.d_model                          // two RMSNorm gains
         + attention + 3 * c.d_model * c.d_ff;  // w1, w3, w2
}

int64_t count_parameters(const ModelConfig& c) {
  const int64_t embedding = c.vocab_size * c.d_model;
  const int64_t head = c.tie_embeddings ? 0 : c.vocab_size * c.d_model;
  return embedding + c.num_layers * block_parameter_count(c) + c.d_model + head;
}

std::string choices_text(const std::vector<std::string>& names) {
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) {
    text += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  }
  return text;
}

DDPD_ENUM_NAMES(Strategy, "naive", "flat", "overlap", "bucketed", "fsdp")
DDPD_ENUM_NAMES(Precision, "fp32", "bf16")
DDPD_ENUM_NAMES(Attention, "auto", "naive", "flash", "sdpa")
DDPD_ENUM_NAMES(Device, "cpu", "cuda")
DDPD_ENUM_NAMES(TokenDtype, "uint16", "int32")
DDPD_ENUM_NAMES(OnStall, "fail", "warn")
DDPD_ENUM_NAMES(LrSchedule, "constant", "cosine", "linear")
DDPD_ENUM_NAMES(GradCompression, "none", "fp16", "bf16")
DDPD_ENUM_NAMES(FsdpUnits, "block", "whole")
DDPD_ENUM_NAMES(ActivationCheckpointing, "none", "block", "selective")
DDPD_ENUM_NAMES(EvalOrder, "sampled", "file")
DDPD_ENUM_NAMES(Transport, "auto", "gloo", "shm")
DDPD_ENUM_NAMES(GroupTransport, "none", "gloo", "shm", "nccl")
DDPD_ENUM_NAMES(Backend, "gloo", "nccl")
DDPD_ENUM_NAMES(Collective, "all_reduce", "all_gather", "reduce_scatter", "broadcast")
DDPD_ENUM_NAMES(CommDtype, "float32", "bfloat16")

namespace {

// A shape flag given with --init-from must agree with the config it names.
void check_agrees(const std::optional<int64_t>& flag_value, int64_t config_value,
                  const std::string& flag, const std::string& field, const std::string& file) {
  require(!flag_value || *flag_value == config_value, flag,
          std::to_string(flag_value.value_or(0)) + " contradicts " + file + "'s " + field + " " +
              std::to_string(config_value));
}

ModelConfig imported_model(const DdpJobOptions& o) {
  const std::string file = hf_config_path(o.init_from);
  ModelConfig config = model_config_from_hf(read_hf_config(o.init_from), file);
  check_agrees(o.d_model, config.d_model, "--d-model", "hidden_size", file);
  check_agrees(o.d_ff, config.d_ff, "--d-ff", "intermediate_size", file);
  check_agrees(o.num_layers, config.num_layers, "--layers", "num_hidden_layers", file);
  check_agrees(o.num_heads, config.num_heads, "--heads", "num_attention_heads", file);
  check_agrees(o.vocab_size, config.vocab_size, "--vocab", "vocab_size", file);
  return config;
}

}  // namespace

ModelConfig DdpJobOptions::resolved_model() const {
  if (!init_from.empty()) {
    ModelConfig config = imported_model(*this);
    config.attention = resolved_attention();
    return config;
  }
  ModelConfig config = model_preset(model);
  if (d_model) config.d_model = *d_model;
  if (d_ff) config.d_ff = *d_ff;
  if (num_layers) config.num_layers = *num_layers;
  if (num_heads) config.num_heads = *num_heads;
  if (vocab_size) config.vocab_size = *vocab_size;
  if (!data_text.empty() && !vocab_size) config.vocab_size = 256;  // one token per byte
  config.attention = resolved_attention();
  return config;
}

Attention DdpJobOptions::resolved_attention() const {
  if (attention != Attention::kAuto) return attention;
  return device == Device::kCuda ? Attention::kSdpa : Attention::kNaive;
}

namespace {

void validate_shape(const ModelConfig& m) {
  require(m.d_model > 0, "--d-model", "must be > 0, got " + std::to_string(m.d_model));
  require(m.d_ff > 0, "--d-ff", "must be > 0, got " + std::to_string(m.d_ff));
  require(m.num_layers >= 0, "--layers", "must be >= 0, got " + std::to_string(m.num_layers));
  require(m.num_heads > 0, "--heads", "must be > 0, got " + std::to_string(m.num_heads));
  require(m.head_dim > 0 || m.d_model % m.num_heads == 0, "--heads",
          "d_model " + std::to_string(m.d_model) + " is not divisible by " +
              std::to_string(m.num_heads) + " heads");
  require(m.resolved_head_dim() % 2 == 0, "--heads",
          "head dimension " + std::to_string(m.resolved_head_dim()) + " must be even for RoPE");
  require(m.vocab_size > 1, "--vocab", "must be > 1, got " + std::to_string(m.vocab_size));
}

// The checks between options; each option's own range is the table's (check_ranges).
void validate_batch(const DdpJobOptions& o, int world_size) {
  const Strategy strategy = o.strategy;
  require(world_size >= 1, "WORLD_SIZE", "must be >= 1, got " + std::to_string(world_size));
  require(o.batch_size % world_size == 0, "--batch",
          "global batch " + std::to_string(o.batch_size) + " is not divisible by world size " +
              std::to_string(world_size));
  require(!(o.shard_optimizer && strategy == Strategy::kFsdp), "--shard-optimizer",
          "fsdp already shards optimizer state; use it with another strategy");
  // A copy of each rank's shards on the next rank: ZeRO-1's optimizer shards, or fsdp's shards
  // of parameters and optimizer state (docs/healing.md).
  require(o.shard_replicas == 0 || o.shard_optimizer || strategy == Strategy::kFsdp,
          "--shard-replicas", "copies sharded state: set --shard-optimizer, or --strategy fsdp");
}

void validate_faults_and_checkpoints(const DdpJobOptions& o, int world_size) {
  if (const auto fault = parse_fault_injection(o.inject, world_size)) {
    // A fault that can never fire would let a drill pass without testing anything.
    require(fault->step < o.steps, "--inject",
            "step " + std::to_string(fault->step) + " is never reached: the job runs steps 0.." +
                std::to_string(o.steps - 1) + " (--steps " + std::to_string(o.steps) + ")");
    require(fault->kind != FaultKind::kCrashDuringCheckpoint ||
                (!o.checkpoint_dir.empty() && o.checkpoint_every > 0),
            "--inject",
            "crash-during-checkpoint needs checkpoints: set --checkpoint-dir and "
            "--checkpoint-every");
    require(fault->kind != FaultKind::kExitDuringHeal || (o.max_restarts > 0 && !o.no_heal),
            "--inject",
            "exit-during-heal needs a job that may heal: set --max-restarts N (N > 0) and "
            "leave out --no-heal");
  }
  require(o.checkpoint_every == 0 || !o.checkpoint_dir.empty(), "--checkpoint-every",
          "needs --checkpoint-dir");
  require((o.resume != "latest" && o.resume != "auto") || !o.checkpoint_dir.empty(), "--resume",
          "'" + o.resume + "' needs --checkpoint-dir");
}

void validate_schedule_and_data(const DdpJobOptions& o, const ModelConfig& m, int world_size) {
  const Strategy strategy = o.strategy;
  require(o.min_lr <= o.lr, "--min-lr", "must be in 0..--lr");
  require(world_size <= 0 || o.batch_size % (static_cast<int64_t>(world_size) * o.grad_accum) == 0,
          "--grad-accum",
          "--batch " + std::to_string(o.batch_size) +
              " must divide by world size × --grad-accum (" + std::to_string(world_size) + " × " +
              std::to_string(o.grad_accum) + ")");
  require(o.grad_compression == GradCompression::kNone || strategy != Strategy::kFsdp,
          "--grad-compression", "applies to naive, flat, overlap and bucketed, not fsdp");
  require(o.data_text.empty() || m.vocab_size >= 256, "--vocab",
          "--data-text needs a vocabulary of at least 256 (one token per byte)");
  require(o.data_text.empty() || o.data_path.empty(), "--data-text",
          "give --data or --data-text, not both");
  require(o.eval_every == 0 || !o.eval_data.empty(), "--eval-every", "needs --eval-data");
  require(o.export_hf.empty() || o.export_hf != o.init_from, "--export-hf",
          "must not be the --init-from directory (the export would overwrite its source)");
  require(o.min_world_size >= 0 && (world_size <= 0 || o.min_world_size <= world_size),
          "--min-world-size",
          "must be in 0..world size (" + std::to_string(world_size) + "), got " +
              std::to_string(o.min_world_size));
  require(o.transport != Transport::kShm || o.device != Device::kCuda, "--transport",
          "shm is for CPU ranks (cuda ranks use NCCL)");
}

}  // namespace

// The model's shape, then each option's range in the table's order, then the checks between
// options.
void validate(const DdpJobOptions& o, int world_size) {
  // The imported config.json decides the model; a preset named beside it would be ignored.
  // --model's default cannot be told from --model tiny typed out, so only another name is refused.
  require(o.init_from.empty() || o.model == kJobDefaults.model, "--model",
          "'" + o.model + "' and --init-from " + o.init_from +
              " both name the model: the imported config.json decides it, so leave out --model "
              "(with --init-from only its default, " +
              kJobDefaults.model + ", is accepted)");
  const ModelConfig m = o.resolved_model();  // checks --model
  validate_shape(m);
  check_ranges(o);
  validate_batch(o, world_size);
  validate_faults_and_checkpoints(o, world_size);
  validate_schedule_and_data(o, m, world_size);
}

double learning_rate_at(const DdpJobOptions& o, int64_t step) {
  if (step < o.lr_warmup_steps) {
    return o.lr * static_cast<double>(step + 1) / static_cast<double>(o.lr_warmup_steps);
  }
  if (o.lr_schedule == LrSchedule::kConstant) return o.lr;
  const int64_t decay_steps = o.steps - o.lr_warmup_steps - 1;
  const double progress =
      decay_steps <= 0 ? 1.0
                       : std::min(1.0, static_cast<double>(step - o.lr_warmup_steps) / decay_steps);
  if (o.lr_schedule == LrSchedule::kLinear) return o.lr - (o.lr - o.min_lr) * progress;
  return o.min_lr + (o.lr - o.min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace ddpd
