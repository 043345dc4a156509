#include "ddpd/core/hf_export.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "ddpd/common/job_options.h"
#include "hf/hf_weights.h"
#include "train/checkpoint.h"

namespace ddpd {
namespace {

// The model a checkpoint's metadata records. Fields newer than the checkpoint take the preset
// defaults (checkpoints from before grouped-query attention).
ModelConfig recorded_model(const nlohmann::json& model) {
  ModelConfig c;
  c.vocab_size = model.at("vocab_size");
  c.d_model = model.at("d_model");
  c.d_ff = model.at("d_ff");
  c.num_layers = model.at("num_layers");
  c.num_heads = model.at("num_heads");
  c.num_kv_heads = model.value("num_kv_heads", c.num_heads);
  c.head_dim = model.value("head_dim", c.d_model / c.num_heads);
  c.qkv_bias = model.value("qkv_bias", false);
  c.rms_norm_eps = model.value("rms_norm_eps", c.rms_norm_eps);
  c.rope_theta = model.value("rope_theta", c.rope_theta);
  c.tie_embeddings = model.value("tie_embeddings", false);
  return c;
}

}  // namespace

void check_export_target(const std::string& out_dir, bool force) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (force || !fs::exists(out_dir, error)) return;
  if (!fs::is_directory(out_dir, error)) {
    throw OptionError("--hf", out_dir + " is a file, not a directory");
  }
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(out_dir, error)) {
    names.push_back(entry.path().filename().string());
  }
  if (names.empty()) return;
  std::sort(names.begin(), names.end());
  std::string shown;
  for (size_t i = 0; i < names.size() && i < 3; ++i) shown += (i ? ", " : "") + names[i];
  if (names.size() > 3) shown += ", …";
  throw OptionError("--hf", out_dir + " is not empty (" + shown +
                                "): pass --force to replace its model files, or name a new "
                                "directory");
}

std::vector<std::string> copy_hf_side_files(const std::string& from_dir,
                                            const std::string& to_dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> copied;
  for (const auto& name : kHfSideFiles) {
    const fs::path from = fs::path(from_dir) / name;
    std::error_code error;
    if (!fs::is_regular_file(from, error)) continue;
    fs::copy_file(from, fs::path(to_dir) / name, fs::copy_options::overwrite_existing, error);
    if (error) {
      throw std::runtime_error(from.string() + ": cannot be copied into " + to_dir + ": " +
                               error.message());
    }
    copied.push_back(name);
  }
  return copied;
}

int export_checkpoint_to_hf(const std::string& checkpoint, const std::string& out_dir,
                            int64_t max_shard_bytes) {
  detail::CheckpointReader reader(detail::resolve_resume(checkpoint, ""));
  const ModelConfig config = recorded_model(reader.metadata().at("model"));
  std::vector<std::pair<std::string, torch::Tensor>> full;
  for (const auto& name : detail::hf_tensor_names(config)) {
    const std::string tensor = "param/" + name.ddpd;
    const std::vector<int64_t> shape = reader.shape(tensor);
    const int64_t numel = c10::multiply_integers(shape);
    full.emplace_back(name.ddpd, reader.read(tensor, 0, numel).reshape(shape));
  }
  const nlohmann::json base = reader.metadata().value("hf_config", nlohmann::json::object());
  detail::save_hf_model(out_dir, config, base, full, max_shard_bytes);
  // The tokenizer of the model the run started from (checkpoints record --init-from).
  const std::string init_from = reader.metadata().value("init_from", std::string());
  if (!init_from.empty()) {
    if (std::filesystem::is_directory(init_from)) {
      copy_hf_side_files(init_from, out_dir);
    } else {
      std::fprintf(stderr,
                   "warning: the tokenizer files were not copied: %s (the checkpoint's "
                   "--init-from) is not a directory here; copy them from the original model "
                   "into %s\n",
                   init_from.c_str(), out_dir.c_str());
    }
  }
  return static_cast<int>(full.size());
}

}  // namespace ddpd
