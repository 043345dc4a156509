// A Hugging Face model's config.json, read into the job model's ModelConfig and written back from
// it (docs/models.md). The architectures: LlamaForCausalLM (Mistral and SmolLM2 configs are
// Llama configs) and Qwen2ForCausalLM (q/k/v biases). A field the model cannot honour is refused
// naming it, never ignored: a model that loads but computes something else would train silently
// wrong.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "ddpd/common/job_options.h"

namespace ddpd {

// DIR/config.json's path.
std::string hf_config_path(const std::string& dir);

// The ModelConfig `config` (the parsed config.json at `file`) describes. Throws
// OptionError("--init-from", "<file>: <field>: <reason>") for a field it cannot honour: another
// model_type, a rope_scaling other than the default, sliding-window attention in use, biases
// other than Qwen2's q/k/v, an activation other than silu, attention dropout, a head count that
// does not divide, a field of the wrong type.
ModelConfig model_config_from_hf(const nlohmann::json& config, const std::string& file);

// Reads and parses DIR/config.json (OptionError("--init-from") naming the file when absent or not
// JSON).
nlohmann::json read_hf_config(const std::string& dir);

// The config.json of `model`: `base` (an imported model's own config, or an empty object) with
// every field ddpd's shape decides set from `model`: a LlamaConfig, or a Qwen2Config when the
// model has q/k/v biases. `dtype` is the stored weights' ("float32", "bfloat16").
nlohmann::json hf_config_of(const ModelConfig& model, const nlohmann::json& base,
                            const std::string& dtype);

}  // namespace ddpd
