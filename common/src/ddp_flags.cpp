#include "ddpd/common/ddp_flags.h"

#include <charconv>
#include <climits>

namespace ddpd {
namespace {

// An integer flag's text, checked before CLI11 converts it: CLI11 saturates a value out of the
// type's range (--steps 99999999999999999999 became INT64_MAX) and wraps a negative one into an
// unsigned type (--seed -1 became 2^64 - 1). Whether the value makes sense is validate()'s.
CLI::Validator integer_text(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        int64_t value = 0;
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, value);
        if (ec == std::errc() && ptr == end && value >= lo && value <= hi) return "";
        return "'" + text + "' is not an integer in " + std::to_string(lo) + ".." +
               std::to_string(hi);
      },
      "INT");
}

// Every integer flag, with the range its field's type can hold.
void check_integer_flags(CLI::App& app) {
  for (const char* name :
       {"--d-model", "--d-ff", "--layers", "--heads", "--vocab", "--context", "--batch", "--steps",
        "--warmup-steps", "--spread-every", "--journal-size", "--checkpoint-every",
        "--keep-checkpoints", "--lr-warmup-steps", "--grad-accum", "--eval-every", "--eval-batches",
        "--fsdp-prefetch"}) {
    app.get_option(name)->check(integer_text(INT64_MIN, INT64_MAX));
  }
  for (const char* name : {"--threads", "--max-restarts", "--min-world-size"}) {
    app.get_option(name)->check(integer_text(INT_MIN, INT_MAX));
  }
  app.get_option("--seed")->check(integer_text(0, INT64_MAX));
}

// An enum flag given as '' is refused here: the API reads an empty string as "unset" (proto3),
// so `--strategy ''` used to run as the default and show a blank strategy.
void check_enum_flags(CLI::App& app) {
  const CLI::Validator non_empty(
      [](std::string& text) -> std::string { return text.empty() ? "must not be empty" : ""; },
      "NAME");
  for (const char* name : {"--model", "--strategy", "--precision", "--device", "--attention",
                           "--data-dtype", "--on-stall", "--transport", "--lr-schedule",
                           "--grad-compression", "--fsdp-units", "--eval-order"}) {
    app.get_option(name)->check(non_empty);
  }
}

// An enum flag: its name is parsed when the flag is given (an OptionError naming it otherwise),
// and --help shows the default's name.
template <typename E>
CLI::Option* add_enum_option(CLI::App& app, E& value, const std::string& help) {
  return app
      .add_option_function<std::string>(
          EnumInfo<E>::kFlag, [&value](const std::string& name) { value = parse_enum<E>(name); },
          help)
      ->default_str(enum_name(value));
}

}  // namespace

namespace {

// Model and batch.
void add_model_flags(CLI::App& app, DdpJobOptions& o) {
  app.add_option("--model", o.model, "Model preset: tiny, small, medium, large, xl, 2.7B")
      ->capture_default_str();
  app.add_option("--d-model", o.d_model, "Override the preset's d_model");
  app.add_option("--d-ff", o.d_ff, "Override the preset's d_ff");
  app.add_option("--layers", o.num_layers, "Override the preset's number of layers");
  app.add_option("--heads", o.num_heads, "Override the preset's number of heads");
  app.add_option("--vocab", o.vocab_size, "Override the vocabulary size");
  app.add_option("--context", o.context_length, "Context length (tokens per sample)")
      ->capture_default_str();
  app.add_option("--batch", o.batch_size, "Global batch size (divisible by the world size)")
      ->capture_default_str();
  app.add_option("--steps", o.steps, "Training steps, warm-up included")->capture_default_str();
  app.add_option("--warmup-steps", o.warmup_steps, "Steps left out of the statistics")
      ->capture_default_str();
  app.add_option("--seed", o.seed, "Seed (model init uses seed + rank, then rank 0's wins)")
      ->capture_default_str();
}

// Strategy, optimizer and numerics.
void add_optimizer_flags(CLI::App& app, DdpJobOptions& o) {
  add_enum_option(app, o.strategy, "naive, flat, overlap, bucketed or fsdp");
  app.add_option("--bucket-mb", o.bucket_size_mb, "Bucket cap in MiB (bucketed)")
      ->capture_default_str();
  app.add_flag("--shard-optimizer", o.shard_optimizer, "ZeRO-1 optimizer-state sharding");
  app.add_option("--shard-replicas", o.shard_replicas,
                 "ZeRO-1 and fsdp: 1 keeps a copy of each rank's shards on the next rank, so a "
                 "lost rank is replaced, or its survivors shrink, from memory (docs/healing.md)")
      ->capture_default_str();
  app.add_option("--lr", o.lr, "AdamW learning rate")->capture_default_str();
  app.add_option("--beta1", o.beta1, "AdamW beta1")->capture_default_str();
  app.add_option("--beta2", o.beta2, "AdamW beta2")->capture_default_str();
  app.add_option("--eps", o.eps, "AdamW epsilon")->capture_default_str();
  app.add_option("--weight-decay", o.weight_decay, "AdamW weight decay")->capture_default_str();
  add_enum_option(app, o.precision, "fp32 or bf16 (autocast)");
  add_enum_option(app, o.device, "cpu (gloo) or cuda (nccl, GPU = local rank)");
  add_enum_option(app, o.attention,
                  "auto (sdpa on cuda, naive on cpu), naive (full score matrix), flash "
                  "(FlashAttention-2) or sdpa (scaled_dot_product_attention)");
}

// Data, measurement and timeouts.
void add_data_flags(CLI::App& app, DdpJobOptions& o) {
  app.add_option("--data", o.data_path, "Token file (flat binary); random tokens when unset");
  add_enum_option(app, o.data_dtype, "uint16 or int32");
  app.add_option("--spread-every", o.spread_every, "Measure param spread every K steps (0: never)")
      ->capture_default_str();
  app.add_option("--max-param-spread", o.max_param_spread,
                 "Fail the job when the param spread exceeds this (0: never)");
  app.add_option(
         "--threads", o.threads,
         "Intra-op threads per rank, at most 256 and clamped to the host's cores (0: cores / "
         "world size)")
      ->capture_default_str();
  app.add_option("--timeout", o.collective_timeout_s, "Collective and rendezvous timeout, seconds")
      ->capture_default_str();
}

// What the daemons watch and do: stalls, stragglers, faults, checkpoints, restarts.
void add_daemon_flags(CLI::App& app, DdpJobOptions& o) {
  app.add_option("--stall-seconds", o.stall_seconds,
                 "Daemon jobs: seconds without a completed collective or step on any rank before "
                 "the coordinator reports a stall (0: never)")
      ->capture_default_str();
  add_enum_option(app, o.on_stall, "fail (the job fails with the analysis) or warn");
  app.add_option("--straggler-threshold", o.straggler_threshold,
                 "Daemon jobs: the largest compute score (1 / a rank's compute relative to the "
                 "others') reported as a straggler, when it also stands out of the step noise "
                 "for 30 steps (0: never)")
      ->capture_default_str();
  app.add_option("--inject", o.inject,
                 "Fault injection: KIND:rank=R,step=S[,seconds=T][,factor=F], KIND hang, exit, "
                 "slow, skip-collective or crash-during-checkpoint (docs/diagnosis.md)");
  app.add_option("--checkpoint-dir", o.checkpoint_dir,
                 "Directory of checkpoints (every worker must reach it: docs/checkpoints.md)");
  app.add_option("--checkpoint-every", o.checkpoint_every,
                 "Save a checkpoint every K steps (0: never)")
      ->capture_default_str();
  app.add_option("--keep-checkpoints", o.keep_checkpoints, "Keep the newest N (0: all)")
      ->capture_default_str();
  app.add_option("--resume", o.resume,
                 "Continue from DIR/step-N, DIR (its latest) or latest (under --checkpoint-dir); "
                 "--steps stays the total");
  app.add_option("--max-restarts", o.max_restarts,
                 "Daemon jobs: restart from the latest checkpoint after a lost or failed rank or a "
                 "stall, at most N times")
      ->capture_default_str();
  app.add_option("--min-world-size", o.min_world_size,
                 "Daemon jobs: a restart may shrink the job to this many ranks (0: no shrink)")
      ->capture_default_str();
  app.add_flag("--no-heal", o.no_heal,
               "Daemon jobs: restart from the checkpoint even where a lost rank could be replaced "
               "in place by an idle worker (docs/healing.md)");
}

// The training loop: schedule, clipping, accumulation, compression, evaluation.
void add_loop_flags(CLI::App& app, DdpJobOptions& o) {
  add_enum_option(app, o.lr_schedule, "constant, cosine or linear (to --min-lr)");
  app.add_option("--lr-warmup-steps", o.lr_warmup_steps, "Linear warm-up steps of the lr")
      ->capture_default_str();
  app.add_option("--min-lr", o.min_lr, "Where cosine and linear schedules end")
      ->capture_default_str();
  app.add_option("--clip-grad-norm", o.clip_grad_norm,
                 "Clip the global gradient norm across ranks to X (0: off)")
      ->capture_default_str();
  app.add_option("--grad-accum", o.grad_accum,
                 "Micro-batches per optimizer step (only the last backward synchronises)")
      ->capture_default_str();
  add_enum_option(app, o.grad_compression,
                  "Gradient all-reduce in none (fp32), fp16 or bf16 (not fsdp)");
  app.add_option("--data-text", o.data_text,
                 "Train on a text file's bytes (vocab 256), e.g. /usr/share/common-licenses/GPL-3");
  app.add_option("--eval-data", o.eval_data,
                 "Held-out data, in the training data's format (--data-dtype, or text)");
  app.add_option("--eval-every", o.eval_every, "Held-out loss every K steps (0: never)")
      ->capture_default_str();
  app.add_option("--eval-batches", o.eval_batches, "Global batches per held-out evaluation")
      ->capture_default_str();
  add_enum_option(app, o.eval_order,
                  "sampled (the seeded order) or file (the first --eval-batches x --batch windows "
                  "of --eval-data in file order: docs/data.md)");
}

// A size in Hugging Face's units, decimal as theirs: 5GB is 5e9 bytes. Plain digits are bytes.
int64_t shard_size_of(const std::string& text) {
  static const std::vector<std::pair<std::string, int64_t>> units = {
      {"GB", 1000000000}, {"MB", 1000000}, {"KB", 1000}, {"B", 1}};
  int64_t scale = 1;
  std::string digits = text;
  for (const auto& [suffix, factor] : units) {
    if (text.size() > suffix.size() &&
        text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0) {
      digits = text.substr(0, text.size() - suffix.size());
      scale = factor;
      break;
    }
  }
  int64_t value = 0;
  const char* end = digits.data() + digits.size();
  const auto [ptr, ec] = std::from_chars(digits.data(), end, value);
  require(ec == std::errc() && ptr == end && value > 0 && value <= INT64_MAX / scale,
          "--max-shard-size",
          "must be a size such as 5GB, 500MB or 1000000 (bytes), got '" + text + "'");
  return value * scale;
}

// --max-shard-size, for a job's --export-hf and for `export`: one declaration, one default.
void add_max_shard_size_option(CLI::App& app, int64_t& bytes, const std::string& help) {
  app.add_option_function<std::string>(
         "--max-shard-size", [&bytes](const std::string& text) { bytes = shard_size_of(text); },
         help)
      ->default_str("5GB");
}

// Hugging Face models in and out (docs/models.md).
void add_model_io_flags(CLI::App& app, DdpJobOptions& o) {
  app.add_option("--init-from", o.init_from,
                 "A Hugging Face model directory (config.json and safetensors): its shape and "
                 "weights replace the preset's random ones");
  app.add_option("--export-hf", o.export_hf,
                 "At the end, write the weights as a Hugging Face model directory "
                 "(config.json, model.safetensors)");
  add_max_shard_size_option(
      app, o.max_shard_bytes,
      "--export-hf: the largest safetensors file before sharding (decimal units)");
}

// Per-strategy details, debugging and transport.
void add_strategy_detail_flags(CLI::App& app, DdpJobOptions& o) {
  app.add_flag("--static-buckets", o.static_buckets,
               "overlap/bucketed: keep reverse registration order instead of rebuilding buckets in "
               "the order gradients became ready in the first step");
  app.add_flag("--find-unused-parameters", o.find_unused_parameters,
               "overlap/bucketed: reduce parameters that get no gradient as zeros instead of "
               "failing naming them");
  add_enum_option(app, o.fsdp_units,
                  "fsdp: block (a unit per Transformer block, the embedding and the head) or "
                  "whole (the model as one unit)");
  app.add_option("--fsdp-prefetch", o.fsdp_prefetch,
                 "fsdp: units whose all-gather starts while the current one computes (0-2)")
      ->capture_default_str();
  app.add_option("--reshard-after-forward", o.reshard_after_forward,
                 "fsdp: free each unit's full parameters after its forward (true) or keep them "
                 "for its backward (false)")
      ->capture_default_str();
  app.add_flag("--check-collectives", o.check_collectives,
               "Debug: before each collective, ranks compare its fingerprint (op, sequence "
               "number, size, dtype) and fail naming both sides when they differ");
  add_enum_option(app, o.transport,
                  "CPU ranks: auto (shm when every rank is on this host, else gloo, with the "
                  "reason) | gloo (TCP) | shm (shared memory, ranks on one host)");
  app.add_option("--journal-size", o.journal_size,
                 "Collectives each rank's journal keeps (sequence number, op, tag, size, state)")
      ->capture_default_str();
}

}  // namespace

void add_ddp_flags(CLI::App& app, DdpJobOptions& o) {
  // A repeated flag overrides the earlier one, so wrappers can append to a base command line.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_model_flags(app, o);
  add_optimizer_flags(app, o);
  add_data_flags(app, o);
  add_daemon_flags(app, o);
  add_loop_flags(app, o);
  add_model_io_flags(app, o);
  add_strategy_detail_flags(app, o);
  check_integer_flags(app);
  check_enum_flags(app);
}

int64_t parse_shard_size(const std::string& text) { return shard_size_of(text); }

void add_export_flags(CLI::App& app, ExportOptions& o) {
  app.add_option("checkpoint", o.checkpoint,
                 "A ddpd checkpoint: DIR/step-N, or a --checkpoint-dir (its latest)")
      ->required();
  app.add_option("--hf", o.hf_dir, "The Hugging Face model directory to write")->required();
  add_max_shard_size_option(app, o.max_shard_bytes,
                            "The largest safetensors file before sharding (decimal units)");
}

void add_comm_flags(CLI::App& app, CommBenchOptions& o) {
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option_function<std::vector<std::string>>(
         "--collective",
         [&o](const std::vector<std::string>& names) {
           o.collectives.clear();
           for (const auto& name : names) o.collectives.push_back(parse_enum<Collective>(name));
         },
         "all_reduce, all_gather, reduce_scatter, broadcast (several: comma-separated)")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->default_str(enum_name(Collective::kAllReduce));
  app.add_option_function<std::string>(
      "--sizes", [&o](const std::string& list) { o.sizes_bytes = parse_sizes(list); },
      "Buffer sizes, e.g. 1MB,10MB,100MB,1GB (units B, KB, MB, GB; binary)");
  add_enum_option(app, o.dtype, "float32 or bfloat16");
  app.add_option("--warmup", o.warmup, "Untimed iterations per size")->capture_default_str();
  app.add_option("--iters", o.iters, "Timed iterations per size")->capture_default_str();
  app.add_flag("--shared-buffers", o.shared_buffers,
               "all_reduce on buffers every rank maps, read in place (shm transport)");
}

void add_comm_job_flags(CLI::App& app, CommJob& job) {
  add_comm_flags(app, job.bench);
  add_enum_option(app, job.backend, "gloo or nccl");
  add_enum_option(app, job.transport, "gloo backend: auto | gloo | shm");
  app.add_option("--timeout", job.collective_timeout_s, "Collective timeout, seconds")
      ->capture_default_str();
}

}  // namespace ddpd
