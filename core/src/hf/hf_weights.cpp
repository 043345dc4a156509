#include "hf/hf_weights.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "ddpd/common/hf_config.h"
#include "hf/safetensors_dir.h"

namespace ddpd::detail {
namespace {

// Tensors some older checkpoints store that are not parameters (RoPE tables transformers
// recomputes): skipped, not refused.
bool is_derived_buffer(const std::string& name) {
  const std::string suffix = "rotary_emb.inv_freq";
  return name.size() >= suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

torch::ScalarType scalar_type_of(hf::StDtype dtype, const std::string& name) {
  switch (dtype) {
    case hf::StDtype::kF64:
      return torch::kFloat64;
    case hf::StDtype::kF32:
      return torch::kFloat32;
    case hf::StDtype::kF16:
      return torch::kFloat16;
    case hf::StDtype::kBF16:
      return torch::kBFloat16;
    default:
      throw OptionError("--init-from", "tensor '" + name + "' is stored as " +
                                           hf::dtype_name(dtype) +
                                           ", not a floating type (F32, BF16, F16 or F64)");
  }
}

hf::StDtype stored_dtype_of(torch::ScalarType type) {
  switch (type) {
    case torch::kFloat64:
      return hf::StDtype::kF64;
    case torch::kFloat16:
      return hf::StDtype::kF16;
    case torch::kBFloat16:
      return hf::StDtype::kBF16;
    default:
      return hf::StDtype::kF32;
  }
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// The stored tensor `name` as a CPU tensor of its own dtype: copied out of the mapping, so its
// alignment is torch's and the mapping can be released.
torch::Tensor read_stored(const hf::SafetensorsDir& weights, const std::string& name) {
  const hf::TensorEntry& entry = weights.entry(name);
  auto out =
      torch::empty(entry.shape, torch::TensorOptions().dtype(scalar_type_of(entry.dtype, name)));
  std::memcpy(out.data_ptr(), weights.data(name), entry.end - entry.begin);
  weights.release(name);
  return out;
}

}  // namespace

std::vector<HfTensorName> hf_tensor_names(const ModelConfig& c) {
  std::vector<HfTensorName> names = {{"embedding.weight", "model.embed_tokens.weight", 0}};
  const std::vector<std::pair<std::string, std::string>> block = {
      {"norm1.weight", "input_layernorm.weight"},
      {"norm2.weight", "post_attention_layernorm.weight"},
      {"q.weight", "self_attn.q_proj.weight"},
      {"q.bias", "self_attn.q_proj.bias"},
      {"k.weight", "self_attn.k_proj.weight"},
      {"k.bias", "self_attn.k_proj.bias"},
      {"v.weight", "self_attn.v_proj.weight"},
      {"v.bias", "self_attn.v_proj.bias"},
      {"o.weight", "self_attn.o_proj.weight"},
      {"w1.weight", "mlp.gate_proj.weight"},
      {"w3.weight", "mlp.up_proj.weight"},
      {"w2.weight", "mlp.down_proj.weight"}};
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string ddpd = "blocks." + std::to_string(i) + ".";
    const std::string hf = "model.layers." + std::to_string(i) + ".";
    for (const auto& [ours, theirs] : block) {
      const bool bias = ours.find(".bias") != std::string::npos;
      if (bias && !c.qkv_bias) continue;
      const int64_t rope_heads = ours[0] == 'q' ? c.num_heads : ours[0] == 'k' ? c.kv_heads() : 0;
      names.push_back({ddpd + ours, hf + theirs, rope_heads});
    }
  }
  names.push_back({"final_norm.weight", "model.norm.weight", 0});
  if (!c.tie_embeddings) names.push_back({"head.weight", "lm_head.weight", 0});
  return names;
}

torch::Tensor rope_rows_from_hf(const torch::Tensor& rows, int64_t heads) {
  // Within a head, HF row j·(hd/2) + p holds pair p's lane j; ddpd's row 2p + j holds it.
  const int64_t width = rows.size(0) / heads;
  auto tail = rows.sizes().slice(1).vec();
  std::vector<int64_t> split = {heads, 2, width / 2};
  split.insert(split.end(), tail.begin(), tail.end());
  return rows.reshape(split).transpose(1, 2).reshape(rows.sizes()).contiguous();
}

torch::Tensor rope_rows_to_hf(const torch::Tensor& rows, int64_t heads) {
  const int64_t width = rows.size(0) / heads;
  auto tail = rows.sizes().slice(1).vec();
  std::vector<int64_t> split = {heads, width / 2, 2};
  split.insert(split.end(), tail.begin(), tail.end());
  return rows.reshape(split).transpose(1, 2).reshape(rows.sizes()).contiguous();
}

void load_hf_weights(const std::string& dir, const ModelConfig& config,
                     const std::vector<std::pair<std::string, torch::Tensor>>& named) {
  const hf::SafetensorsDir weights(dir);
  std::map<std::string, torch::Tensor> params(named.begin(), named.end());
  const std::vector<HfTensorName> names = hf_tensor_names(config);
  std::set<std::string> expected;
  for (const auto& name : names) expected.insert(name.hf);
  // A tied model's head is its embedding; some writers store it anyway, as transformers ignores.
  if (config.tie_embeddings) expected.insert("lm_head.weight");
  for (const auto& stored : weights.names()) {
    if (!expected.count(stored) && !is_derived_buffer(stored)) {
      throw OptionError("--init-from", weights.file_of(stored) + ": tensor '" + stored +
                                           "' is unexpected: the config's model has no such "
                                           "parameter");
    }
  }
  torch::NoGradGuard no_grad;
  for (const auto& name : names) {
    if (!weights.contains(name.hf)) {
      throw OptionError("--init-from", dir + ": tensor '" + name.hf + "' is missing");
    }
    torch::Tensor& param = params.at(name.ddpd);
    const hf::TensorEntry& entry = weights.entry(name.hf);
    if (entry.shape != param.sizes().vec()) {
      throw OptionError("--init-from", weights.file_of(name.hf) + ": tensor '" + name.hf +
                                           "' has shape " + shape_text(entry.shape) +
                                           ", the config's model needs " +
                                           shape_text(param.sizes().vec()));
    }
    torch::Tensor value = read_stored(weights, name.hf);
    if (name.rope_heads > 0) value = rope_rows_from_hf(value, name.rope_heads);
    param.copy_(value.to(param.scalar_type()));
  }
}

void save_hf_model(const std::string& dir, const ModelConfig& config, const nlohmann::json& base,
                   const std::vector<std::pair<std::string, torch::Tensor>>& full,
                   int64_t max_shard_bytes) {
  std::filesystem::create_directories(dir);
  const std::map<std::string, torch::Tensor> values(full.begin(), full.end());
  std::vector<torch::Tensor> keep_alive;
  std::vector<hf::TensorToWrite> tensors;
  torch::ScalarType dtype = torch::kFloat32;
  for (const auto& name : hf_tensor_names(config)) {
    torch::Tensor value = values.at(name.ddpd).detach().to(torch::kCPU).contiguous();
    if (name.rope_heads > 0) value = rope_rows_to_hf(value, name.rope_heads);
    dtype = value.scalar_type();
    keep_alive.push_back(value);
    tensors.push_back({name.hf, stored_dtype_of(value.scalar_type()), value.sizes().vec(),
                       value.data_ptr(), static_cast<size_t>(value.nbytes())});
  }
  hf::write_safetensors_dir(dir, tensors, static_cast<uint64_t>(max_shard_bytes));
  const std::string dtype_name = dtype == torch::kFloat64    ? "float64"
                                 : dtype == torch::kBFloat16 ? "bfloat16"
                                 : dtype == torch::kFloat16  ? "float16"
                                                             : "float32";
  std::ofstream out(dir + "/config.json");
  out << hf_config_of(config, base, dtype_name).dump(2) << "\n";
  if (!out) throw std::runtime_error(dir + "/config.json: cannot be written");
}

}  // namespace ddpd::detail
