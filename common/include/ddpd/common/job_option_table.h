// The DDP job's options, each declared once. An option's default is its member's initializer in
// DdpJobOptions (job_options.h); this table gives the rest: its flag (the job file's key is the
// flag without dashes), the API's DdpSpec field, the help text and the range of a number. From
// it come the CLI flags (ddp_flags.cpp), the range checks (validate, job_options.cpp), the API
// conversion both ways (spec_convert.cpp, by field name through protobuf's reflection), job
// files and `show --spec` (client/src/job_file.cpp, through the flags) and the options table
// in docs/job-files.md (job_options_markdown). Checks between options (--batch against the
// world size, --shard-replicas against the strategy) stay code in validate().
//
// tests/unit/job_option_table_test.cpp checks that the table names every DdpSpec field once,
// with a matching type, that the CLI declares exactly these flags, and that docs/job-files.md
// holds the table as job_options_markdown() writes it. Adding an option: docs/contributing.md.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "ddpd/common/job_options.h"

namespace ddpd {

// The values a number may take: [lo, hi], either end open or absent. Every double must also be
// finite (inf passed as a number once and overflowed the timeout's milliseconds).
struct OptionRange {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false;
  bool hi_open = false;
  const char* note = nullptr;  // what a special value means ("0: never"), shown with an error

  bool bounded() const { return std::isfinite(lo) || std::isfinite(hi); }
  bool contains(double value) const {
    return (lo_open ? value > lo : value >= lo) && (hi_open ? value < hi : value <= hi);
  }
  // "> 0", ">= 1", "0..256", "[0, 1)", "(0, 2592000]"; empty when unbounded.
  std::string text() const;
};

constexpr OptionRange above(double lo, const char* note = nullptr) {
  return {lo, std::numeric_limits<double>::infinity(), true, false, note};
}
constexpr OptionRange at_least(double lo, const char* note = nullptr) {
  return {lo, std::numeric_limits<double>::infinity(), false, false, note};
}
constexpr OptionRange closed(double lo, double hi, const char* note = nullptr) {
  return {lo, hi, false, false, note};
}
constexpr OptionRange half_open(double lo, double hi, const char* note = nullptr) {
  return {lo, hi, false, true, note};
}

// One option: `T` is its member's type (int64_t, int, uint64_t, double, bool, std::string,
// std::optional<int64_t>, or an enum with DDPD_ENUM_INFO).
template <typename T>
struct JobOption {
  const char* flag;          // "--bucket-mb"; the job file's key is "bucket-mb" (or bucket_mb)
  T DdpJobOptions::*member;  // where the value lives; its initializer is the default
  const char* proto_field;   // DdpSpec's field ("bucket_size_mb")
  const char* help;
  OptionRange range{};
  // A number written with units (--max-shard-size 5GB): text to value and back. Null: digits.
  int64_t (*parse)(const std::string&) = nullptr;
  std::string (*format)(int64_t) = nullptr;
  // A file or directory (a std::string option): ddpctl makes it absolute against its working
  // directory (a job file's, against the file's directory) before it submits, so the daemons,
  // which run elsewhere, read the same file (docs/job-files.md).
  bool path = false;

  JobOption with(OptionRange r) const {
    JobOption copy = *this;
    copy.range = r;
    return copy;
  }
  JobOption as_path() const {
    JobOption copy = *this;
    copy.path = true;
    return copy;
  }
  JobOption with_units(int64_t (*p)(const std::string&), std::string (*f)(int64_t)) const {
    JobOption copy = *this;
    copy.parse = p;
    copy.format = f;
    return copy;
  }
};

template <typename T>
JobOption<T> option(const char* flag, T DdpJobOptions::*member, const char* proto_field,
                    const char* help) {
  return JobOption<T>{flag, member, proto_field, help};
}

// A size in Hugging Face's decimal units (5GB is 5e9 bytes; plain digits are bytes); throws
// OptionError("--max-shard-size"). shard_size_text writes one back ("5GB").
int64_t parse_shard_size(const std::string& text);
std::string shard_size_text(int64_t bytes);

namespace job_option_groups {
using O = DdpJobOptions;

template <typename Visit>
void model_and_batch(Visit& visit) {
  visit(
      option("--model", &O::model, "model", "Model preset: tiny, small, medium, large, xl, 2.7B"));
  visit(option("--d-model", &O::d_model, "d_model", "Override the preset's d_model"));
  visit(option("--d-ff", &O::d_ff, "d_ff", "Override the preset's d_ff"));
  visit(option("--layers", &O::num_layers, "num_layers", "Override the preset's number of layers"));
  visit(option("--heads", &O::num_heads, "num_heads", "Override the preset's number of heads"));
  visit(option("--vocab", &O::vocab_size, "vocab_size", "Override the vocabulary size"));
  visit(option("--context", &O::context_length, "context_length",
               "Context length (tokens per sample)")
            .with(above(0)));
  visit(option("--batch", &O::batch_size, "batch_size",
               "Global batch size (divisible by the world size)")
            .with(above(0)));
  visit(option("--steps", &O::steps, "steps", "Training steps, warm-up included")
            .with(at_least(0, "0: evaluate and export only")));
  visit(
      option("--warmup-steps", &O::warmup_steps, "warmup_steps", "Steps left out of the statistics")
          .with(at_least(0)));
  visit(
      option("--seed", &O::seed, "seed", "Seed (model init uses seed + rank, then rank 0's wins)"));
}

template <typename Visit>
void strategy_and_optimizer(Visit& visit) {
  visit(option("--strategy", &O::strategy, "strategy", "naive, flat, overlap, bucketed or fsdp"));
  visit(option("--bucket-mb", &O::bucket_size_mb, "bucket_size_mb", "Bucket cap in MiB (bucketed)")
            .with(above(0)));
  visit(option("--shard-optimizer", &O::shard_optimizer, "shard_optimizer",
               "ZeRO-1 optimizer-state sharding"));
  visit(option("--shard-replicas", &O::shard_replicas, "shard_replicas",
               "ZeRO-1 and fsdp: 1 keeps a copy of each rank's shards on the next rank, so a "
               "lost rank is replaced, or its survivors shrink, from memory (docs/healing.md)")
            .with(closed(0, 1)));
  visit(option("--lr", &O::lr, "lr", "AdamW learning rate").with(above(0)));
  visit(option("--beta1", &O::beta1, "beta1", "AdamW beta1").with(half_open(0, 1)));
  visit(option("--beta2", &O::beta2, "beta2", "AdamW beta2").with(half_open(0, 1)));
  visit(option("--eps", &O::eps, "eps", "AdamW epsilon").with(above(0)));
  visit(option("--weight-decay", &O::weight_decay, "weight_decay", "AdamW weight decay")
            .with(at_least(0)));
  visit(option("--precision", &O::precision, "precision", "fp32 or bf16 (autocast)"));
  visit(option("--device", &O::device, "device", "cpu (gloo) or cuda (nccl, GPU = local rank)"));
  visit(option("--attention", &O::attention, "attention",
               "auto (sdpa on cuda, naive on cpu), naive (full score matrix), flash "
               "(FlashAttention-2) or sdpa (scaled_dot_product_attention)"));
}

template <typename Visit>
void data_and_timeouts(Visit& visit) {
  visit(option("--data", &O::data_path, "data_path",
               "Token file (flat binary); random tokens when unset")
            .as_path());
  visit(option("--data-dtype", &O::data_dtype, "data_dtype", "uint16 or int32"));
  visit(option("--spread-every", &O::spread_every, "spread_every",
               "Measure param spread every K steps (0: never)")
            .with(at_least(0)));
  visit(option("--max-param-spread", &O::max_param_spread, "max_param_spread",
               "Fail the job when the param spread exceeds this (0: never)")
            .with(at_least(0)));
  visit(option("--threads", &O::threads, "threads",
               "Intra-op threads per rank, at most 256 and clamped to the host's cores (0: "
               "cores / world size)")
            .with(closed(0, kMaxThreadsPerRank, "0: cores / world size")));
  // Bounded above: a timeout past ~9.2e9 s overflowed the milliseconds it becomes (the
  // rendezvous then "timed out after -9223372036854775s").
  visit(option("--timeout", &O::collective_timeout_s, "collective_timeout_s",
               "Collective and rendezvous timeout, seconds")
            .with({0, kMaxCollectiveTimeoutSeconds, true, false, "seconds, 30 days at most"}));
}

template <typename Visit>
void daemon_watch(Visit& visit) {
  visit(option("--stall-seconds", &O::stall_seconds, "stall_seconds",
               "Daemon jobs: seconds without a completed collective or step on any rank before "
               "the coordinator reports a stall (0: never)")
            .with(at_least(0, "0: never")));
  visit(option("--on-stall", &O::on_stall, "on_stall",
               "fail (the job fails with the analysis) or warn"));
  visit(option("--straggler-threshold", &O::straggler_threshold, "straggler_threshold",
               "Daemon jobs: the largest compute score (1 / a rank's compute relative to the "
               "others') reported as a straggler, when it also stands out of the step noise "
               "for 30 steps (0: never)")
            .with(half_open(0, 1, "0: never")));
  visit(option("--inject", &O::inject, "inject",
               "Fault injection: KIND:rank=R,step=S[,seconds=T][,factor=F], KIND hang, exit, "
               "slow, skip-collective or crash-during-checkpoint (docs/diagnosis.md)"));
}

template <typename Visit>
void checkpoints_and_restarts(Visit& visit) {
  visit(option("--checkpoint-dir", &O::checkpoint_dir, "checkpoint_dir",
               "Directory of checkpoints (every worker must reach it: docs/checkpoints.md)")
            .as_path());
  visit(option("--checkpoint-every", &O::checkpoint_every, "checkpoint_every",
               "Save a checkpoint every K steps (0: never)")
            .with(at_least(0, "0: no checkpoints")));
  visit(option("--keep-checkpoints", &O::keep_checkpoints, "keep_checkpoints",
               "Keep the newest N (0: all)")
            .with(at_least(0, "0: keep all")));
  visit(option("--resume", &O::resume, "resume",
               "Continue from DIR/step-N, DIR (its latest) or latest (under --checkpoint-dir); "
               "--steps stays the total")
            .as_path());  // but the words latest and auto
  visit(option("--max-restarts", &O::max_restarts, "max_restarts",
               "Daemon jobs: restart from the latest checkpoint after a lost or failed rank or a "
               "stall, at most N times")
            .with(at_least(0)));
  // At most the world size: validate() checks it against the job's.
  visit(option("--min-world-size", &O::min_world_size, "min_world_size",
               "Daemon jobs: a restart may shrink the job to this many ranks (0: no shrink)"));
  visit(option("--no-heal", &O::no_heal, "no_heal",
               "Daemon jobs: restart from the checkpoint even where a lost rank could be "
               "replaced in place by an idle worker (docs/healing.md)"));
}

template <typename Visit>
void training_loop(Visit& visit) {
  visit(option("--lr-schedule", &O::lr_schedule, "lr_schedule",
               "constant, cosine or linear (to --min-lr)"));
  visit(option("--lr-warmup-steps", &O::lr_warmup_steps, "lr_warmup_steps",
               "Linear warm-up steps of the lr")
            .with(at_least(0)));
  // At most --lr: validate() checks it.
  visit(option("--min-lr", &O::min_lr, "min_lr", "Where cosine and linear schedules end")
            .with(at_least(0)));
  visit(option("--clip-grad-norm", &O::clip_grad_norm, "clip_grad_norm",
               "Clip the global gradient norm across ranks to X (0: off)")
            .with(at_least(0, "0: no clipping")));
  visit(option("--grad-accum", &O::grad_accum, "grad_accum",
               "Micro-batches per optimizer step (only the last backward synchronises)")
            .with(at_least(1)));
  visit(option("--grad-compression", &O::grad_compression, "grad_compression",
               "Gradient all-reduce in none (fp32), fp16 or bf16 (not fsdp)"));
}

template <typename Visit>
void evaluation_and_text(Visit& visit) {
  visit(option("--data-text", &O::data_text, "data_text",
               "Train on a text file's bytes (vocab 256), e.g. /usr/share/common-licenses/GPL-3")
            .as_path());
  visit(option("--eval-data", &O::eval_data, "eval_data",
               "Held-out data, in the training data's format (--data-dtype, or text)")
            .as_path());
  visit(
      option("--eval-every", &O::eval_every, "eval_every", "Held-out loss every K steps (0: never)")
          .with(at_least(0, "0: no evaluation")));
  visit(option("--eval-batches", &O::eval_batches, "eval_batches",
               "Global batches per held-out evaluation")
            .with(at_least(1)));
  visit(option("--eval-order", &O::eval_order, "eval_order",
               "sampled (the seeded order) or file (the first --eval-batches x --batch windows "
               "of --eval-data in file order: docs/data.md)"));
}

template <typename Visit>
void model_files(Visit& visit) {
  visit(option("--init-from", &O::init_from, "init_from",
               "A Hugging Face model directory (config.json and safetensors): its shape and "
               "weights replace the preset's random ones")
            .as_path());
  visit(option("--export-hf", &O::export_hf, "export_hf",
               "At the end, write the weights as a Hugging Face model directory "
               "(config.json, model.safetensors)")
            .as_path());
  visit(option("--max-shard-size", &O::max_shard_bytes, "max_shard_bytes",
               "--export-hf: the largest safetensors file before sharding (decimal units)")
            .with(above(0))
            .with_units(parse_shard_size, shard_size_text));
}

template <typename Visit>
void strategy_details(Visit& visit) {
  visit(option("--static-buckets", &O::static_buckets, "static_buckets",
               "overlap/bucketed: keep reverse registration order instead of rebuilding buckets "
               "in the order gradients became ready in the first step"));
  visit(option("--find-unused-parameters", &O::find_unused_parameters, "find_unused_parameters",
               "overlap/bucketed: reduce parameters that get no gradient as zeros instead of "
               "failing naming them"));
  visit(option("--fsdp-units", &O::fsdp_units, "fsdp_units",
               "fsdp: block (a unit per Transformer block, the embedding and the head) or "
               "whole (the model as one unit)"));
  visit(option("--fsdp-prefetch", &O::fsdp_prefetch, "fsdp_prefetch",
               "fsdp: units whose all-gather starts while the current one computes (0-2)")
            .with(closed(0, 2)));
  visit(option("--reshard-after-forward", &O::reshard_after_forward, "reshard_after_forward",
               "fsdp: free each unit's full parameters after its forward (true) or keep them "
               "for its backward (false)"));
  visit(option("--activation-checkpointing", &O::activation_checkpointing,
               "activation_checkpointing",
               "none, block (recompute each Transformer block's forward in backward) or "
               "selective (keep each block's attention output, recompute the rest)"));
  visit(option("--check-collectives", &O::check_collectives, "check_collectives",
               "Debug: before each collective, ranks compare its fingerprint (op, sequence "
               "number, size, dtype) and fail naming both sides when they differ"));
  visit(option("--transport", &O::transport, "transport",
               "CPU ranks: auto (shm when every rank is on this host, else gloo, with the "
               "reason) | gloo (TCP) | shm (shared memory, ranks on one host)"));
  visit(option("--journal-size", &O::journal_size, "journal_size",
               "Collectives each rank's journal keeps (sequence number, op, tag, size, state)")
            .with(closed(1, 1000000)));
}

}  // namespace job_option_groups

// Calls visit(JobOption<T>) for each option, in --help's order.
template <typename Visit>
void for_each_job_option(Visit&& visit) {
  namespace g = job_option_groups;
  g::model_and_batch(visit);
  g::strategy_and_optimizer(visit);
  g::data_and_timeouts(visit);
  g::daemon_watch(visit);
  g::checkpoints_and_restarts(visit);
  g::training_loop(visit);
  g::evaluation_and_text(visit);
  g::model_files(visit);
  g::strategy_details(visit);
}

// Checks each option against its range; throws OptionError naming the first out of range, in the
// table's order ("--bucket-mb: must be > 0, got 0"). validate() calls it.
void check_ranges(const DdpJobOptions& options);

// docs/job-files.md's options table: one row per option, its default read from DdpJobOptions{}.
std::string job_options_markdown();

}  // namespace ddpd
