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
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ddpd/common/job_options.h"
#include "ddpd/core/grad_sync.h"
#include "hf/safetensors_dir.h"

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
// ddpd's interleaved RoPE layout to transformers' half-split one.
torch::Tensor rope_rows_to_hf(const torch::Tensor& rows, int64_t heads);

// ddpd's row `row` of a q or k projection whose heads are `width` rows each is transformers' row
// rope_row_in_hf(row, width): within a head, ddpd's row 2p + j is HF's row j · width / 2 + p.
int64_t rope_row_in_hf(int64_t row, int64_t width);

// DIR's weights (model.safetensors or its shards), memory-mapped and checked against the model's
// parameters, read by ddpd name and element range: the whole of each tensor for the replicated
// strategies (load_hf_weights), each rank's shard for fsdp (SyncOptions::source). A range read
// touches only the pages of the rows it spans and drops them afterwards, so a reader's resident
// memory grows by what it copies out, not by the file.
//
// Construction throws OptionError("--init-from") naming the tensor (and its file) that is
// missing, unexpected or misshapen, and SafetensorsError's message for a malformed file. read()
// converts F32, BF16, F16 and F64 to `out`'s dtype (another stored dtype is refused naming the
// tensor) and moves q/k rows into ddpd's RoPE layout. Thread contract: read() may be called
// from any thread (it only reads the mapping).
class HfWeightSource final : public ParameterSource {
 public:
  // `shapes`: each unique parameter of the model by ddpd name, with its shape.
  HfWeightSource(const std::string& dir, const ModelConfig& config,
                 const std::vector<std::pair<std::string, std::vector<int64_t>>>& shapes);
  void read(const std::string& name, int64_t begin, int64_t end,
            const torch::Tensor& out) const override;

 private:
  // A read into a CPU tensor of the stored dtype copies straight from the mapping; any other
  // goes through a buffer of at most this many elements (8 MiB of F64), so what a read
  // allocates besides `out` does not grow with the tensor. Measured: a 76 MB model imported at
  // fsdp world 3 through a whole-range buffer rose 39-48 MB per rank for a 25 MB share, the
  // freed buffers fragmenting the heap.
  static constexpr int64_t kReadChunkElements = int64_t{1} << 20;

  // Elements [begin, end) of the stored tensor, in ddpd's row order, to `to` (stored dtype).
  void copy_stored(const HfTensorName& names, const hf::TensorEntry& entry, int64_t begin,
                   int64_t end, uint8_t* to) const;

  hf::SafetensorsDir weights_;
  std::map<std::string, HfTensorName> by_ddpd_name_;
};

// Copies DIR's weights into `named` (the model's unique parameters by ddpd name, on any device),
// whole tensor by whole tensor through an HfWeightSource (its errors).
void load_hf_weights(const std::string& dir, const ModelConfig& config,
                     const std::vector<std::pair<std::string, torch::Tensor>>& named);

// Writes DIR as a Hugging Face model directory: config.json (hf_config_of(config, base, ...))
// and the weights `full` (every parameter's full value by ddpd name) as safetensors in their own
// dtype, sharded above max_shard_bytes. Creates DIR.
void save_hf_model(const std::string& dir, const ModelConfig& config, const nlohmann::json& base,
                   const std::vector<std::pair<std::string, torch::Tensor>>& full,
                   int64_t max_shard_bytes);

}  // namespace ddpd::detail
