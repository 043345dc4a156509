#include "ddpd/common/hf_config.h"

#include <fstream>

#include "ddpd/common/unreadable_path.h"

namespace ddpd {
namespace {

class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& config, const std::string& file)
      : config_(config), file_(file) {}

  [[noreturn]] void refuse(const std::string& field, const std::string& reason) const {
    throw OptionError("--init-from", file_ + ": " + field + ": " + reason);
  }
  bool has(const std::string& field) const {
    return config_.contains(field) && !config_.at(field).is_null();
  }
  int64_t integer(const std::string& field) const {
    if (!has(field)) refuse(field, "missing");
    const auto& value = config_.at(field);
    if (!value.is_number_integer()) refuse(field, "must be an integer, got " + value.dump());
    const int64_t n = value.get<int64_t>();
    if (n <= 0) refuse(field, "must be > 0, got " + std::to_string(n));
    return n;
  }
  int64_t integer_or(const std::string& field, int64_t fallback) const {
    return has(field) ? integer(field) : fallback;
  }
  double number_or(const std::string& field, double fallback) const {
    if (!has(field)) return fallback;
    const auto& value = config_.at(field);
    if (!value.is_number()) refuse(field, "must be a number, got " + value.dump());
    return value.get<double>();
  }
  bool flag_or(const std::string& field, bool fallback) const {
    if (!has(field)) return fallback;
    const auto& value = config_.at(field);
    if (!value.is_boolean()) refuse(field, "must be true or false, got " + value.dump());
    return value.get<bool>();
  }
  std::string text_or(const std::string& field, const std::string& fallback) const {
    if (!has(field)) return fallback;
    const auto& value = config_.at(field);
    if (!value.is_string()) refuse(field, "must be a string, got " + value.dump());
    return value.get<std::string>();
  }
  const nlohmann::json& at(const std::string& field) const { return config_.at(field); }

 private:
  const nlohmann::json& config_;
  const std::string& file_;
};

// transformers 5 writes rope_parameters {rope_type, rope_theta}; older configs rope_theta and
// rope_scaling. Only the default (unscaled) RoPE is implemented.
double rope_theta_of(const ConfigReader& c) {
  auto check_type = [&](const std::string& field, const nlohmann::json& scaling) {
    if (scaling.is_null()) return;
    if (!scaling.is_object()) c.refuse(field, "must be an object, got " + scaling.dump());
    const std::string key = scaling.contains("rope_type") ? "rope_type" : "type";
    const std::string type = scaling.value(key, std::string("default"));
    if (type != "default") {
      c.refuse(field + "." + key, "'" + type +
                                      "' is not implemented (ddpd implements the default, "
                                      "unscaled RoPE)");
    }
  };
  if (c.has("rope_scaling")) check_type("rope_scaling", c.at("rope_scaling"));
  if (c.has("rope_parameters")) {
    const auto& p = c.at("rope_parameters");
    check_type("rope_parameters", p);
    if (p.contains("rope_theta")) {
      if (!p.at("rope_theta").is_number()) c.refuse("rope_parameters.rope_theta", "not a number");
      return p.at("rope_theta").get<double>();
    }
  }
  return c.number_or("rope_theta", 10000.0);
}

void refuse_unsupported(const ConfigReader& c, const std::string& model_type) {
  if (c.text_or("hidden_act", "silu") != "silu") {
    c.refuse("hidden_act", "'" + c.text_or("hidden_act", "") + "' is not implemented (silu only)");
  }
  if (c.flag_or("mlp_bias", false)) c.refuse("mlp_bias", "MLP biases are not implemented");
  if (c.flag_or("attention_bias", false)) {
    c.refuse("attention_bias", "Llama's q/k/v/o biases are not implemented (Qwen2's are)");
  }
  if (c.number_or("attention_dropout", 0.0) != 0.0) {
    c.refuse("attention_dropout", "dropout is not implemented (must be 0)");
  }
  const bool qwen_window = model_type == "qwen2" && c.flag_or("use_sliding_window", false);
  if (qwen_window || (model_type == "mistral" && c.has("sliding_window"))) {
    c.refuse("sliding_window", "sliding-window attention is not implemented");
  }
  if (c.has("layer_types")) {
    for (const auto& type : c.at("layer_types")) {
      if (type != "full_attention") {
        c.refuse("layer_types", type.dump() + " layers are not implemented (full_attention only)");
      }
    }
  }
}

}  // namespace

std::string hf_config_path(const std::string& dir) { return dir + "/config.json"; }

ModelConfig model_config_from_hf(const nlohmann::json& config, const std::string& file) {
  if (!config.is_object()) throw OptionError("--init-from", file + ": not a JSON object");
  const ConfigReader c(config, file);
  const std::string model_type = c.text_or("model_type", "");
  if (model_type != "llama" && model_type != "mistral" && model_type != "qwen2") {
    c.refuse("model_type", "'" + model_type + "' is not supported (llama, mistral or qwen2)");
  }
  refuse_unsupported(c, model_type);
  ModelConfig m;
  m.vocab_size = c.integer("vocab_size");
  m.d_model = c.integer("hidden_size");
  m.d_ff = c.integer("intermediate_size");
  m.num_layers = c.integer("num_hidden_layers");
  m.num_heads = c.integer("num_attention_heads");
  m.num_kv_heads = c.integer_or("num_key_value_heads", m.num_heads);
  if (m.num_heads % m.num_kv_heads != 0) {
    c.refuse("num_key_value_heads", std::to_string(m.num_kv_heads) + " does not divide " +
                                        std::to_string(m.num_heads) + " attention heads");
  }
  if (!c.has("head_dim") && m.d_model % m.num_heads != 0) {
    c.refuse("num_attention_heads", "does not divide hidden_size, and no head_dim is given");
  }
  m.head_dim = c.integer_or("head_dim", m.d_model / m.num_heads);
  if (m.head_dim % 2 != 0) c.refuse("head_dim", "must be even for RoPE");
  m.rms_norm_eps = c.number_or("rms_norm_eps", 1e-6);
  m.rope_theta = rope_theta_of(c);
  m.qkv_bias = model_type == "qwen2";
  // LlamaConfig's, Qwen2Config's and MistralConfig's default (save_pretrained writes it whenever
  // it differs from the base class's true, so an absent field means the class default).
  m.tie_embeddings = c.flag_or("tie_word_embeddings", false);
  return m;
}

nlohmann::json read_hf_config(const std::string& dir) {
  const std::string path = hf_config_path(dir);
  std::ifstream in(path);
  if (!in) {
    throw UnreadablePath("--init-from", path,
                         path +
                             ": cannot be read (a Hugging Face model directory holds "
                             "config.json)");
  }
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw OptionError("--init-from", path + ": not JSON (" + e.what() + ")");
  }
}

nlohmann::json hf_config_of(const ModelConfig& m, const nlohmann::json& base,
                            const std::string& dtype) {
  nlohmann::json c = base.is_object() ? base : nlohmann::json::object();
  const bool qwen = m.qkv_bias;
  c["architectures"] = {qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM"};
  c["model_type"] = qwen ? "qwen2" : "llama";
  c["vocab_size"] = m.vocab_size;
  c["hidden_size"] = m.d_model;
  c["intermediate_size"] = m.d_ff;
  c["num_hidden_layers"] = m.num_layers;
  c["num_attention_heads"] = m.num_heads;
  c["num_key_value_heads"] = m.kv_heads();
  c["head_dim"] = m.resolved_head_dim();
  c["hidden_act"] = "silu";
  c["rms_norm_eps"] = m.rms_norm_eps;
  // Both spellings: transformers 5 reads rope_parameters, 4.x rope_theta.
  c["rope_theta"] = m.rope_theta;
  c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", m.rope_theta}};
  c.erase("rope_scaling");
  c["tie_word_embeddings"] = m.tie_embeddings;
  c["attention_dropout"] = 0.0;
  if (!qwen) {
    c["attention_bias"] = false;
    c["mlp_bias"] = false;
  }
  if (!c.contains("max_position_embeddings")) c["max_position_embeddings"] = 2048;
  c["dtype"] = dtype;
  c.erase("torch_dtype");  // transformers 4.x's spelling, which would win over dtype there
  return c;
}

}  // namespace ddpd
