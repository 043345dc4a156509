// Hugging Face weights in and out of the Transformer LM (docs/models.md): the name map between
// ddpd's parameters and transformers' LlamaForCausalLM / Qwen2ForCausalLM state dict, and the
// RoPE layout conversion.
//
// RoPE: ddpd rotates interleaved lane pairs (2p, 2p + 1) of each head; transformers rotates
// halves (p, p + head_dim / 2). Rotating the same pairs by the same angles, the two differ only
// by a permutation of each head's q and k lanes, and attention scores (q · k) do not depend on
// the order of the lanes. So import permutes the rows of q_proj and k_proj (and their biases)
// into ddpd's layout and export permutes them back, as llama.cpp's converter does: a pure
// permutation, bitwise exact both ways, with one attention implementation in the model.
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ddpd/common/job_options.h"

namespace ddpd::detail {

// Where one ddpd parameter lives in a Hugging Face state dict.
struct HfTensorName {
  std::string ddpd;    // "blocks.0.q.weight"
  std::string hf;      // "model.layers.0.self_attn.q_proj.weight"
  int64_t rope_heads;  // > 0: q or k, whose rows are permuted per head (that many heads)
};

// Every parameter of `config`'s model (each once: a tied head is the embedding), in ddpd's
// registration order.
std::vector<HfTensorName> hf_tensor_names(const ModelConfig& config);

// Rows of a q or k projection (weight [heads · head_dim, in] or bias [heads · head_dim]) from
// transformers' half-split RoPE layout to ddpd's interleaved one, and back.
torch::Tensor rope_rows_from_hf(const torch::Tensor& rows, int64_t heads);
torch::Tensor rope_rows_to_hf(const torch::Tensor& rows, int64_t heads);

// Copies DIR's weights (model.safetensors or its shards) into `named` (the model's unique
// parameters by ddpd name, on any device), converting F32, BF16, F16 and F64 to each
// parameter's dtype. Throws OptionError("--init-from") naming the tensor (and its file) that is
// missing, unexpected, misshapen or of another dtype, and SafetensorsError's message for a
// malformed file.
void load_hf_weights(const std::string& dir, const ModelConfig& config,
                     const std::vector<std::pair<std::string, torch::Tensor>>& named);

// Writes DIR as a Hugging Face model directory: config.json (hf_config_of(config, base, ...))
// and the weights `full` (every parameter's full value by ddpd name) as safetensors in their own
// dtype, sharded above max_shard_bytes. Creates DIR.
void save_hf_model(const std::string& dir, const ModelConfig& config, const nlohmann::json& base,
                   const std::vector<std::pair<std::string, torch::Tensor>>& full,
                   int64_t max_shard_bytes);

}  // namespace ddpd::detail
