#include "hf/hf_weights.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "ddpd/common/hf_config.h"

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

torch::Tensor rope_rows_to_hf(const torch::Tensor& rows, int64_t heads) {
  const int64_t width = rows.size(0) / heads;
  auto tail = rows.sizes().slice(1).vec();
  std::vector<int64_t> split = {heads, width / 2, 2};
  split.insert(split.end(), tail.begin(), tail.end());
  return rows.reshape(split).transpose(1, 2).reshape(rows.sizes()).contiguous();
}

int64_t rope_row_in_hf(int64_t row, int64_t width) {
  const int64_t head = row / width, lane = row % width;
  return head * width + (lane % 2) * (width / 2) + lane / 2;
}

HfWeightSource::HfWeightSource(
    const std::string& dir, const ModelConfig& config,
    const std::vector<std::pair<std::string, std::vector<int64_t>>>& shapes)
    : weights_(dir) {
  const std::map<std::string, std::vector<int64_t>> shape_of(shapes.begin(), shapes.end());
  const std::vector<HfTensorName> names = hf_tensor_names(config);
  std::set<std::string> expected;
  for (const auto& name : names) expected.insert(name.hf);
  // A tied model's head is its embedding; some writers store it anyway, as transformers ignores.
  if (config.tie_embeddings) expected.insert("lm_head.weight");
  for (const auto& stored : weights_.names()) {
    if (!expected.count(stored) && !is_derived_buffer(stored)) {
      throw OptionError("--init-from", weights_.file_of(stored) + ": tensor '" + stored +
                                           "' is unexpected: the config's model has no such "
                                           "parameter");
    }
  }
  for (const auto& name : names) {
    if (!weights_.contains(name.hf)) {
      throw OptionError("--init-from", dir + ": tensor '" + name.hf + "' is missing");
    }
    const std::vector<int64_t>& wanted = shape_of.at(name.ddpd);
    const hf::TensorEntry& entry = weights_.entry(name.hf);
    if (entry.shape != wanted) {
      throw OptionError("--init-from", weights_.file_of(name.hf) + ": tensor '" + name.hf +
                                           "' has shape " + shape_text(entry.shape) +
                                           ", the config's model needs " + shape_text(wanted));
    }
    scalar_type_of(entry.dtype, name.hf);  // refuses a stored type that is not floating
    by_ddpd_name_.emplace(name.ddpd, name);
  }
}

void HfWeightSource::read(const std::string& name, int64_t begin, int64_t end,
                          const torch::Tensor& out) const {
  const HfTensorName& names = by_ddpd_name_.at(name);
  const hf::TensorEntry& entry = weights_.entry(names.hf);
  if (begin < 0 || end < begin || end > entry.numel() || out.numel() != end - begin) {
    throw std::invalid_argument("--init-from: elements [" + std::to_string(begin) + ", " +
                                std::to_string(end) + ") of tensor '" + names.hf +
                                "' do not fit it or the tensor they go to");
  }
  if (end == begin) return;
  const torch::ScalarType stored = scalar_type_of(entry.dtype, names.hf);
  if (out.device().is_cpu() && out.is_contiguous() && out.scalar_type() == stored) {
    copy_stored(names, entry, begin, end, static_cast<uint8_t*>(out.data_ptr()));
  } else {
    // Converted (or moved to the device) a chunk at a time through one buffer.
    torch::Tensor buffer = torch::empty({std::min(end - begin, kReadChunkElements)},
                                        torch::TensorOptions().dtype(stored));
    for (int64_t at = begin; at < end; at += kReadChunkElements) {
      const int64_t stop = std::min(end, at + kReadChunkElements);
      copy_stored(names, entry, at, stop, static_cast<uint8_t*>(buffer.data_ptr()));
      out.narrow(0, at - begin, stop - at).copy_(buffer.narrow(0, 0, stop - at));
    }
  }
  weights_.release(names.hf);
}

void HfWeightSource::copy_stored(const HfTensorName& names, const hf::TensorEntry& entry,
                                 int64_t begin, int64_t end, uint8_t* to) const {
  const size_t size = hf::element_size(entry.dtype);
  const uint8_t* from = weights_.data(names.hf);
  if (names.rope_heads == 0) {
    std::memcpy(to, from + begin * size, (end - begin) * size);
    return;
  }
  // Row by row: ddpd's row r is HF's rope_row_in_hf(r), and [begin, end) may start or end inside
  // a row (an fsdp shard's edge).
  const int64_t columns = entry.numel() / entry.shape.at(0);
  const int64_t width = entry.shape.at(0) / names.rope_heads;
  for (int64_t at = begin; at < end;) {
    const int64_t row = at / columns, column = at % columns;
    const int64_t take = std::min(end - at, columns - column);
    std::memcpy(to + (at - begin) * size,
                from + (rope_row_in_hf(row, width) * columns + column) * size, take * size);
    at += take;
  }
}

void load_hf_weights(const std::string& dir, const ModelConfig& config,
                     const std::vector<std::pair<std::string, torch::Tensor>>& named) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
  for (const auto& [name, param] : named) shapes.emplace_back(name, param.sizes().vec());
  const HfWeightSource weights(dir, config, shapes);
  torch::NoGradGuard no_grad;
  for (const auto& [name, param] : named) weights.read(name, 0, param.numel(), param.view({-1}));
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
