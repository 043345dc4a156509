#include "ddpd/api/spec_convert.h"

#include <algorithm>
#include <map>

namespace ddpd {

v1::DdpSpec to_proto(const DdpJobOptions& o) {
  v1::DdpSpec s;
  s.set_model(o.model);
  if (o.d_model) s.set_d_model(*o.d_model);
  if (o.d_ff) s.set_d_ff(*o.d_ff);
  if (o.num_layers) s.set_num_layers(*o.num_layers);
  if (o.num_heads) s.set_num_heads(*o.num_heads);
  if (o.vocab_size) s.set_vocab_size(*o.vocab_size);
  s.set_context_length(o.context_length);
  s.set_batch_size(o.batch_size);
  s.set_steps(o.steps);
  s.set_warmup_steps(o.warmup_steps);
  s.set_seed(o.seed);
  s.set_strategy(enum_name(o.strategy));
  s.set_bucket_size_mb(o.bucket_size_mb);
  s.set_shard_optimizer(o.shard_optimizer);
  s.set_shard_replicas(o.shard_replicas);
  s.set_lr(o.lr);
  s.set_beta1(o.beta1);
  s.set_beta2(o.beta2);
  s.set_eps(o.eps);
  s.set_weight_decay(o.weight_decay);
  s.set_precision(enum_name(o.precision));
  s.set_attention(enum_name(o.attention));
  s.set_device(enum_name(o.device));
  s.set_data_path(o.data_path);
  s.set_data_dtype(enum_name(o.data_dtype));
  s.set_spread_every(o.spread_every);
  s.set_max_param_spread(o.max_param_spread);
  s.set_threads(o.threads);
  s.set_collective_timeout_s(o.collective_timeout_s);
  s.set_journal_size(o.journal_size);
  s.set_stall_seconds(o.stall_seconds);
  s.set_on_stall(enum_name(o.on_stall));
  s.set_inject(o.inject);
  s.set_check_collectives(o.check_collectives);
  s.set_transport(enum_name(o.transport));
  s.set_checkpoint_dir(o.checkpoint_dir);
  s.set_checkpoint_every(o.checkpoint_every);
  s.set_keep_checkpoints(o.keep_checkpoints);
  s.set_resume(o.resume);
  s.set_max_restarts(o.max_restarts);
  s.set_no_heal(o.no_heal);
  s.set_min_world_size(o.min_world_size);
  s.set_lr_schedule(enum_name(o.lr_schedule));
  s.set_lr_warmup_steps(o.lr_warmup_steps);
  s.set_min_lr(o.min_lr);
  s.set_clip_grad_norm(o.clip_grad_norm);
  s.set_grad_accum(o.grad_accum);
  s.set_grad_compression(enum_name(o.grad_compression));
  s.set_data_text(o.data_text);
  s.set_eval_data(o.eval_data);
  s.set_eval_every(o.eval_every);
  s.set_eval_batches(o.eval_batches);
  s.set_static_buckets(o.static_buckets);
  s.set_find_unused_parameters(o.find_unused_parameters);
  s.set_fsdp_units(enum_name(o.fsdp_units));
  s.set_fsdp_prefetch(o.fsdp_prefetch);
  s.set_reshard_after_forward(o.reshard_after_forward);
  s.set_straggler_threshold(o.straggler_threshold);
  s.set_eval_order(enum_name(o.eval_order));
  s.set_init_from(o.init_from);
  s.set_export_hf(o.export_hf);
  s.set_max_shard_bytes(o.max_shard_bytes);
  return s;
}

DdpJobOptions from_proto(const v1::DdpSpec& s) {
  DdpJobOptions o;
  if (!s.model().empty()) o.model = s.model();
  if (s.has_d_model()) o.d_model = s.d_model();
  if (s.has_d_ff()) o.d_ff = s.d_ff();
  if (s.has_num_layers()) o.num_layers = s.num_layers();
  if (s.has_num_heads()) o.num_heads = s.num_heads();
  if (s.has_vocab_size()) o.vocab_size = s.vocab_size();
  if (s.has_context_length()) o.context_length = s.context_length();
  if (s.has_batch_size()) o.batch_size = s.batch_size();
  if (s.has_steps()) o.steps = s.steps();
  if (s.has_warmup_steps()) o.warmup_steps = s.warmup_steps();
  if (s.has_seed()) o.seed = s.seed();
  if (!s.strategy().empty()) o.strategy = parse_enum<Strategy>(s.strategy());
  if (s.has_bucket_size_mb()) o.bucket_size_mb = s.bucket_size_mb();
  o.shard_optimizer = s.shard_optimizer();
  o.shard_replicas = s.shard_replicas();
  if (s.has_lr()) o.lr = s.lr();
  if (s.has_beta1()) o.beta1 = s.beta1();
  if (s.has_beta2()) o.beta2 = s.beta2();
  if (s.has_eps()) o.eps = s.eps();
  if (s.has_weight_decay()) o.weight_decay = s.weight_decay();
  if (!s.precision().empty()) o.precision = parse_enum<Precision>(s.precision());
  if (!s.attention().empty()) o.attention = parse_enum<Attention>(s.attention());
  if (!s.device().empty()) o.device = parse_enum<Device>(s.device());
  o.data_path = s.data_path();
  if (!s.data_dtype().empty()) o.data_dtype = parse_enum<TokenDtype>(s.data_dtype());
  if (s.has_spread_every()) o.spread_every = s.spread_every();
  if (s.has_max_param_spread()) o.max_param_spread = s.max_param_spread();
  if (s.has_threads()) o.threads = s.threads();
  if (s.has_collective_timeout_s()) o.collective_timeout_s = s.collective_timeout_s();
  if (s.has_journal_size()) o.journal_size = s.journal_size();
  if (s.has_stall_seconds()) o.stall_seconds = s.stall_seconds();
  if (!s.on_stall().empty()) o.on_stall = parse_enum<OnStall>(s.on_stall());
  o.inject = s.inject();
  o.check_collectives = s.check_collectives();
  if (!s.transport().empty()) o.transport = parse_enum<Transport>(s.transport());
  o.checkpoint_dir = s.checkpoint_dir();
  if (s.has_checkpoint_every()) o.checkpoint_every = s.checkpoint_every();
  if (s.has_keep_checkpoints()) o.keep_checkpoints = s.keep_checkpoints();
  o.resume = s.resume();
  if (s.has_max_restarts()) o.max_restarts = s.max_restarts();
  o.no_heal = s.no_heal();
  if (s.has_min_world_size()) o.min_world_size = s.min_world_size();
  if (!s.lr_schedule().empty()) o.lr_schedule = parse_enum<LrSchedule>(s.lr_schedule());
  if (s.has_lr_warmup_steps()) o.lr_warmup_steps = s.lr_warmup_steps();
  if (s.has_min_lr()) o.min_lr = s.min_lr();
  if (s.has_clip_grad_norm()) o.clip_grad_norm = s.clip_grad_norm();
  if (s.has_grad_accum()) o.grad_accum = s.grad_accum();
  if (!s.grad_compression().empty())
    o.grad_compression = parse_enum<GradCompression>(s.grad_compression());
  o.data_text = s.data_text();
  o.eval_data = s.eval_data();
  if (s.has_eval_every()) o.eval_every = s.eval_every();
  if (s.has_eval_batches()) o.eval_batches = s.eval_batches();
  o.static_buckets = s.static_buckets();
  o.find_unused_parameters = s.find_unused_parameters();
  if (!s.fsdp_units().empty()) o.fsdp_units = parse_enum<FsdpUnits>(s.fsdp_units());
  if (s.has_fsdp_prefetch()) o.fsdp_prefetch = s.fsdp_prefetch();
  if (s.has_reshard_after_forward()) o.reshard_after_forward = s.reshard_after_forward();
  if (s.has_straggler_threshold()) o.straggler_threshold = s.straggler_threshold();
  if (!s.eval_order().empty()) o.eval_order = parse_enum<EvalOrder>(s.eval_order());
  o.init_from = s.init_from();
  o.export_hf = s.export_hf();
  if (s.has_max_shard_bytes()) o.max_shard_bytes = s.max_shard_bytes();
  return o;
}

v1::CommSpec to_proto(const CommJob& job) {
  v1::CommSpec s;
  for (const Collective c : job.bench.collectives) s.add_collectives(enum_name(c));
  for (int64_t size : job.bench.sizes_bytes) s.add_sizes_bytes(size);
  s.set_backend(enum_name(job.backend));
  s.set_transport(enum_name(job.transport));
  s.set_dtype(enum_name(job.bench.dtype));
  s.set_warmup(job.bench.warmup);
  s.set_iters(job.bench.iters);
  s.set_shared_buffers(job.bench.shared_buffers);
  s.set_collective_timeout_s(job.collective_timeout_s);
  return s;
}

CommJob from_proto(const v1::CommSpec& s) {
  CommJob job;
  if (s.collectives_size() > 0) {
    job.bench.collectives.clear();
    for (const auto& name : s.collectives()) {
      job.bench.collectives.push_back(parse_enum<Collective>(name));
    }
  }
  if (s.sizes_bytes_size() > 0)
    job.bench.sizes_bytes.assign(s.sizes_bytes().begin(), s.sizes_bytes().end());
  if (!s.backend().empty()) job.backend = parse_enum<Backend>(s.backend());
  if (!s.transport().empty()) job.transport = parse_enum<Transport>(s.transport());
  if (!s.dtype().empty()) job.bench.dtype = parse_enum<CommDtype>(s.dtype());
  if (s.has_warmup()) job.bench.warmup = s.warmup();
  if (s.has_iters()) job.bench.iters = s.iters();
  if (s.has_shared_buffers()) job.bench.shared_buffers = s.shared_buffers();
  if (s.has_collective_timeout_s()) job.collective_timeout_s = s.collective_timeout_s();
  return job;
}

v1::RankProgress to_proto(const RankPosition& position) {
  v1::RankProgress p;
  p.set_phase(position.phase);
  p.set_step(position.step);
  p.set_last_enqueued(position.last_enqueued);
  p.set_last_completed(position.last_completed);
  if (position.oldest_pending) {
    const CollectiveRecord& c = *position.oldest_pending;
    auto* pending = p.mutable_oldest_pending();
    pending->set_seq(c.seq);
    pending->set_op(c.op);
    pending->set_tag(c.tag);
    pending->set_numel(c.numel);
    pending->set_dtype(c.dtype);
    pending->set_age_seconds(c.age_seconds);
  }
  return p;
}

RankPosition from_proto(const v1::RankProgress& p) {
  RankPosition position{p.phase(), p.step(), p.last_enqueued(), p.last_completed(), std::nullopt};
  if (p.has_oldest_pending()) {
    const auto& c = p.oldest_pending();
    position.oldest_pending =
        CollectiveRecord{c.seq(), c.op(), c.tag(), c.numel(), c.dtype(), c.age_seconds()};
  }
  return position;
}

std::string kind_name(const v1::JobSpec& spec) {
  switch (spec.kind_case()) {
    case v1::JobSpec::kDdp:
      return "ddp";
    case v1::JobSpec::kComm:
      return "comm";
    default:
      return "unknown";
  }
}

std::string proto_field(const std::string& flag) {
  // Flags whose field is not the flag's own name in snake_case.
  static const std::map<std::string, std::string> renamed = {
      {"--layers", "num_layers"},
      {"--heads", "num_heads"},
      {"--vocab", "vocab_size"},
      {"--context", "context_length"},
      {"--batch", "batch_size"},
      {"--data", "data_path"},
      {"--bucket-mb", "bucket_size_mb"},
      {"--timeout", "collective_timeout_s"},
      {"--journal-size", "journal_size"},
      {"--stall-seconds", "stall_seconds"},
      {"--on-stall", "on_stall"},
      {"--inject", "inject"},
      {"--check-collectives", "check_collectives"},
      {"--checkpoint-dir", "checkpoint_dir"},
      {"--checkpoint-every", "checkpoint_every"},
      {"--keep-checkpoints", "keep_checkpoints"},
      {"--resume", "resume"},
      {"--max-restarts", "max_restarts"},
      {"--min-world-size", "min_world_size"},
      {"--no-heal", "no_heal"},
      {"--shard-replicas", "shard_replicas"},
      {"--lr-schedule", "lr_schedule"},
      {"--lr-warmup-steps", "lr_warmup_steps"},
      {"--min-lr", "min_lr"},
      {"--clip-grad-norm", "clip_grad_norm"},
      {"--straggler-threshold", "straggler_threshold"},
      {"--collective", "collectives"},
      {"--sizes", "sizes_bytes"},
      {"--max-shard-size", "max_shard_bytes"},
      {"WORLD_SIZE", "world_size"},
  };
  if (auto it = renamed.find(flag); it != renamed.end()) return it->second;
  if (flag.rfind("--", 0) != 0) return flag;  // already a field name ("kind")
  std::string field = flag.substr(2);
  std::replace(field.begin(), field.end(), '-', '_');
  return field;
}

namespace {

void validate_spec_flags(const v1::JobSpec& spec) {
  if (spec.world_size() < 1) {
    throw OptionError("--world-size", "must be >= 1, got " + std::to_string(spec.world_size()));
  }
  switch (spec.kind_case()) {
    case v1::JobSpec::kDdp:
      validate(from_proto(spec.ddp()), spec.world_size());
      return;
    case v1::JobSpec::kComm: {
      const CommJob job = from_proto(spec.comm());
      validate(job.bench);
      if (job.transport == Transport::kShm && job.backend != Backend::kGloo) {
        throw OptionError("--transport", "shm is for the gloo backend (CPU ranks)");
      }
      if (!(job.collective_timeout_s > 0 &&
            job.collective_timeout_s <= kMaxCollectiveTimeoutSeconds)) {
        throw OptionError("--timeout", "must be > 0 and at most 2592000 seconds (30 days)");
      }
      return;
    }
    case v1::JobSpec::KIND_NOT_SET:
      throw OptionError("kind", "the job spec names no job kind");
  }
}

}  // namespace

void validate_spec(const v1::JobSpec& spec, FieldNames names) {
  try {
    validate_spec_flags(spec);
  } catch (const OptionError& e) {
    if (names == FieldNames::kFlag) throw;
    throw naming_proto_field(e);
  }
}

OptionError naming_proto_field(const OptionError& error) {
  // what() is "<flag>: <reason>"; keep the reason, name the field.
  return OptionError(proto_field(error.flag()),
                     std::string(error.what()).substr(error.flag().size() + 2));
}

bool is_terminal(v1::JobState state) {
  return state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED;
}

std::string failure_text(const v1::JobResult& result) {
  return result.cause() == v1::RANK_FAILURE_DESYNC
             ? "collective desync (--check-collectives): " + result.error()
             : result.error();
}

}  // namespace ddpd
