#include "train/training_checkpoint.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "ddpd/common/hf_config.h"
#include "ddpd/common/remove_tree.h"

namespace ddpd::detail {
namespace {

bool holds_state_of(const TrainingState& s, const torch::Tensor& optimizer_param) {
  return !s.sharded || s.sharded->owner_of(optimizer_param) == s.comm.info().rank;
}

nlohmann::json checkpoint_fields(const TrainingState& s, int64_t steps_done) {
  const ModelConfig& c = s.model.config();
  const DdpJobOptions& o = s.options;
  return {{"format_version", kCheckpointFormatVersion},
          {"model",
           {{"vocab_size", c.vocab_size},
            {"d_model", c.d_model},
            {"d_ff", c.d_ff},
            {"num_layers", c.num_layers},
            {"num_heads", c.num_heads},
            {"num_kv_heads", c.kv_heads()},
            {"head_dim", c.resolved_head_dim()},
            {"qkv_bias", c.qkv_bias},
            {"rms_norm_eps", c.rms_norm_eps},
            {"rope_theta", c.rope_theta},
            {"context_length", o.context_length},
            {"tie_embeddings", c.tie_embeddings}}},
          {"strategy", enum_name(o.strategy)},
          {"shard_optimizer", o.shard_optimizer},
          {"world_size", s.comm.info().world_size},
          {"step", steps_done},
          {"tokens_seen", steps_done * o.batch_size * o.context_length},
          {"data_position", steps_done * o.batch_size},
          {"rng", {{"seed", o.seed}}},
          {"optimizer",
           {{"kind", "adamw"},
            {"lr", o.lr},
            {"beta1", o.beta1},
            {"beta2", o.beta2},
            {"eps", o.eps},
            {"weight_decay", o.weight_decay}}},
          {"launch_order", agreed_launch_order(s.sync)}};
}

nlohmann::json checkpoint_header(const TrainingState& s, int64_t steps_done) {
  nlohmann::json header = checkpoint_fields(s, steps_done);
  // An imported model's own config.json, so an offline export keeps its other fields.
  // Where it came from: an export copies that directory's tokenizer files (hf_export.h).
  if (!s.options.init_from.empty()) {
    header["hf_config"] = read_hf_config(s.options.init_from);
    header["init_from"] = s.options.init_from;
  }
  return header;
}

// Adds this rank's part of every parameter and its AdamW state to `writer`. Replicated tensors
// are written once: each parameter (with its plain-AdamW state) by the rank with the fewest bytes
// assigned so far, the same greedy choice on every rank.
void add_tensors(const TrainingState& s, CheckpointShardWriter& writer) {
  const int rank = s.comm.info().rank, world = s.comm.info().world_size;
  const auto held = s.sync.optimizer_parameters();
  const auto held_ranges = s.sync.optimizer_parameter_ranges();
  auto& state = s.local_optimizer.state();
  size_t index = 0;
  std::vector<int64_t> assigned_bytes(world, 0);
  // Not the strategy and the world size: fsdp shrunk in place to one rank still holds its
  // parameters as a shard (the whole of each), and its module's tensors hold no memory.
  const bool sharded_params = s.sync.sharding() != nullptr;
  const auto named = named_unique_parameters(s.model);
  for (size_t i = 0; i < named.size(); ++i) {
    const auto& [pname, full] = named[i];
    const bool trainable = full.requires_grad();
    const HeldRange range = trainable ? held_ranges.at(index) : HeldRange{};
    const torch::Tensor* shard = trainable ? &held.at(index++) : nullptr;
    const auto& shape = s.parameter_shapes.at(i).second;
    const int64_t numel = c10::multiply_integers(shape);
    const int writing_rank = static_cast<int>(
        std::min_element(assigned_bytes.begin(), assigned_bytes.end()) - assigned_bytes.begin());
    assigned_bytes[writing_rank] += numel * ((shard && !s.sharded) ? 3 : 1);
    const bool my_turn = writing_rank == rank;
    if (sharded_params && shard) {
      writer.add("param/" + pname, shape,
                 shard->detach().reshape(-1).narrow(0, 0, range.end - range.begin), range.begin);
    } else if (my_turn) {
      writer.add("param/" + pname, shape, full, 0);
    }
    if (!shard) continue;
    auto it = state.find(shard->unsafeGetTensorImpl());
    if (it == state.end() || !holds_state_of(s, *shard)) continue;
    // ZeRO-1 state is written by its owner; fsdp's by every rank (its shard); plain AdamW's once.
    if (!s.sharded && !sharded_params && !my_turn) continue;
    auto& adam = static_cast<torch::optim::AdamWParamState&>(*it->second);
    for (const auto& [kind, values] :
         {std::pair<std::string, torch::Tensor>{"exp_avg", adam.exp_avg()},
          {"exp_avg_sq", adam.exp_avg_sq()}}) {
      writer.add(kind + "/" + pname, shape,
                 values.reshape(-1).narrow(0, 0, range.end - range.begin), range.begin,
                 adam.step());
    }
  }
}

}  // namespace

void check_checkpoint_dir_writable(const DdpJobOptions& options, int rank) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(options.checkpoint_dir, ec);
  const std::string probe = options.checkpoint_dir + "/.probe-rank-" + std::to_string(rank);
  std::ofstream out(probe);
  if (ec || !(out << "ok") || !out.flush()) {
    throw OptionError("--checkpoint-dir", "rank " + std::to_string(rank) + " cannot write '" +
                                              options.checkpoint_dir +
                                              "' (every worker of the job must reach it)");
  }
  out.close();
  fs::remove(probe, ec);
}

void check_parameters(CheckpointReader& reader, TransformerLMImpl& model) {
  const auto& saved = reader.metadata().at("model");
  const ModelConfig& config = model.config();
  for (const auto& [key, value] :
       std::map<std::string, int64_t>{{"vocab_size", config.vocab_size},
                                      {"d_model", config.d_model},
                                      {"d_ff", config.d_ff},
                                      {"num_layers", config.num_layers},
                                      {"num_heads", config.num_heads},
                                      {"num_kv_heads", config.kv_heads()},
                                      {"head_dim", config.resolved_head_dim()}}) {
    // Checkpoints from before grouped-query attention have no num_kv_heads or head_dim.
    if (!saved.contains(key)) continue;
    if (saved.at(key).get<int64_t>() != value) {
      throw OptionError("--resume", "the checkpoint's model has " + key + " " +
                                        saved.at(key).dump() + ", this job's " +
                                        std::to_string(value));
    }
  }
  for (auto& [name, p] : named_unique_parameters(model)) {
    const std::string tensor = "param/" + name;
    if (reader.shape(tensor) != p.sizes().vec()) {
      throw OptionError("--resume", "the checkpoint's " + tensor + " has another shape");
    }
  }
}

void load_parameters(CheckpointReader& reader, TransformerLMImpl& model) {
  check_parameters(reader, model);
  torch::NoGradGuard no_grad;
  for (auto& [name, p] : named_unique_parameters(model)) {
    p.copy_(reader.read("param/" + name, 0, p.numel())
                .reshape(p.sizes())
                .to(p.device(), p.scalar_type()));
  }
}

void CheckpointParameterSource::read(const std::string& name, int64_t begin, int64_t end,
                                     const torch::Tensor& out) const {
  const std::string tensor = "param/" + name;
  if (out.device().is_cpu() && out.is_contiguous() && out.scalar_type() == reader_.dtype(tensor)) {
    reader_.read_into(tensor, begin, out);
    return;
  }
  // Converted (or moved to the device) a piece at a time: a shard-sized buffer per read would
  // fragment the heap as HfWeightSource's did (kReadChunkElements).
  constexpr int64_t kPieceElements = int64_t{1} << 20;
  for (int64_t at = begin; at < end; at += kPieceElements) {
    const int64_t stop = std::min(end, at + kPieceElements);
    out.narrow(0, at - begin, stop - at).copy_(reader_.read(tensor, at, stop));
  }
}

namespace {

// The AdamW state of `targets` (optimizer parameters holding `ranges` of the model's trainable
// parameters, in registration order) that `holds` selects, into `optimizer`.
void load_adam_states(CheckpointReader& reader, const TrainingState& s,
                      const std::vector<torch::Tensor>& targets,
                      const std::vector<HeldRange>& ranges, torch::optim::Optimizer& optimizer,
                      const std::function<bool(const torch::Tensor&)>& holds) {
  auto& state = optimizer.state();
  size_t index = 0;
  const auto named = named_unique_parameters(s.model);
  for (size_t i = 0; i < named.size(); ++i) {
    const auto& [name, full] = named[i];
    if (!full.requires_grad()) continue;
    const HeldRange range = ranges.at(index);
    const torch::Tensor& held = targets.at(index++);
    if (!holds(held) || !reader.has("exp_avg/" + name)) continue;
    auto load = [&](const std::string& kind) {
      return reader.read(kind + "/" + name, range.begin, range.end)
          .reshape(held.sizes())
          .to(held.device(), held.scalar_type());
    };
    auto adam = std::make_unique<torch::optim::AdamWParamState>();
    adam->step(reader.adam_step("exp_avg/" + name));
    adam->exp_avg(load("exp_avg"));
    adam->exp_avg_sq(load("exp_avg_sq"));
    state[held.unsafeGetTensorImpl()] = std::move(adam);
  }
}

}  // namespace

void load_optimizer_state(CheckpointReader& reader, const TrainingState& s) {
  const auto targets = s.sync.optimizer_parameters();
  const auto ranges = s.sync.optimizer_parameter_ranges();
  load_adam_states(reader, s, targets, ranges, s.local_optimizer,
                   [&s](const torch::Tensor& p) { return holds_state_of(s, p); });
  torch::optim::Optimizer* replica = s.sharded ? s.sharded->replica_optimizer() : nullptr;
  if (replica) {
    load_adam_states(reader, s, targets, ranges, *replica, [&s](const torch::Tensor& p) {
      return s.sharded->owner_of(p) == s.sharded->replica_of();
    });
  }
  if (s.replica_optimizer) {  // fsdp's copy of the predecessor's shards: its ranges
    ParameterSharding& sharding = sharding_of(s.sync);
    load_adam_states(reader, s, sharding.replica_parameters(), sharding.replica_parameter_ranges(),
                     *s.replica_optimizer, [](const torch::Tensor&) { return true; });
  }
}

int64_t resumed_step(const CheckpointReader& reader, const DdpJobOptions& options) {
  // The data continue at the saved global sample index (step s reads samples from s × batch):
  // the same global batches at any world size, none repeated or skipped.
  const int64_t position = reader.metadata().at("data_position");
  const int64_t step = reader.metadata().at("step");
  if (position != step * options.batch_size) {
    throw OptionError("--batch", "the checkpoint's data position " + std::to_string(position) +
                                     " is not " + std::to_string(step) + " global batches of " +
                                     std::to_string(options.batch_size));
  }
  return step;
}

std::vector<int64_t> resumed_launch_order(const CheckpointReader& reader) {
  const auto found = reader.metadata().find("launch_order");
  if (found == reader.metadata().end()) return {};  // written before the field existed
  try {
    return found->get<std::vector<int64_t>>();
  } catch (const nlohmann::json::exception&) {
    throw OptionError("--resume", "the checkpoint's launch_order is not a list of integers");
  }
}

double save_checkpoint(const TrainingState& s, int64_t steps_done, int64_t crash_after_bytes) {
  // Protocol: rank 0 makes a fresh temporary directory; barrier; every rank writes and fsyncs its
  // file and index; barrier; rank 0 commits (metadata.json, rename, `latest`); barrier, so no rank
  // goes on (or ends the job) before the checkpoint is whole.
  namespace fs = std::filesystem;
  const auto start = std::chrono::steady_clock::now();
  const std::string name = checkpoint_name(steps_done);
  const std::string tmp = s.options.checkpoint_dir + "/.tmp-" + name;
  const int rank = s.comm.info().rank;
  if (rank == 0) {
    remove_tree(tmp);  // ddpd/common/remove_tree.h: why not fs::remove_all
    fs::create_directories(tmp);
  }
  s.comm.barrier();
  CheckpointShardWriter writer(tmp, rank);
  add_tensors(s, writer);
  writer.finish(crash_after_bytes);
  s.comm.barrier();
  if (rank == 0) {
    commit_checkpoint(tmp, s.options.checkpoint_dir + "/" + name, checkpoint_header(s, steps_done),
                      s.comm.info().world_size, static_cast<int>(s.options.keep_checkpoints));
  }
  s.comm.barrier();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace ddpd::detail
