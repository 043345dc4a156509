// config.json → ModelConfig (common/include/ddpd/common/hf_config.h): every field ddpd honours is
// read, every one it cannot honour is refused naming the field, and a config ddpd writes reads
// back as the same model.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "ddpd/common/hf_config.h"
#include "support/process.h"

namespace ddpd {
namespace {

nlohmann::json llama() {
  return {{"model_type", "llama"},
          {"vocab_size", 300},
          {"hidden_size", 64},
          {"intermediate_size", 96},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"rms_norm_eps", 1e-6},
          {"hidden_act", "silu"},
          {"tie_word_embeddings", true},
          {"attention_bias", false},
          {"mlp_bias", false},
          {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 500000.0}}}};
}

// The OptionError's message for `config`, or "" when it is accepted.
std::string config_refusal(const nlohmann::json& config) {
  try {
    model_config_from_hf(config, "DIR/config.json");
  } catch (const OptionError& e) {
    EXPECT_EQ(e.flag(), "--init-from");
    return e.what();
  }
  return "";
}

TEST(HfConfig, ReadsEveryFieldTheModelHonours) {
  const ModelConfig m = model_config_from_hf(llama(), "config.json");
  EXPECT_EQ(m.vocab_size, 300);
  EXPECT_EQ(m.d_model, 64);
  EXPECT_EQ(m.d_ff, 96);
  EXPECT_EQ(m.num_layers, 2);
  EXPECT_EQ(m.num_heads, 4);
  EXPECT_EQ(m.kv_heads(), 2);
  EXPECT_EQ(m.resolved_head_dim(), 16);
  EXPECT_DOUBLE_EQ(m.rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(m.rope_theta, 500000.0);
  EXPECT_TRUE(m.tie_embeddings);
  EXPECT_FALSE(m.qkv_bias);
}

TEST(HfConfig, ReadsTransformers4Spellings) {
  nlohmann::json c = llama();
  c.erase("rope_parameters");
  c["rope_theta"] = 1e6;
  c["rope_scaling"] = nullptr;
  c.erase("num_key_value_heads");
  EXPECT_DOUBLE_EQ(model_config_from_hf(c, "config.json").rope_theta, 1e6);
  EXPECT_EQ(model_config_from_hf(c, "config.json").kv_heads(), 4);
}

TEST(HfConfig, Qwen2HasQkvBiasesAndAGivenHeadDim) {
  nlohmann::json c = llama();
  c["model_type"] = "qwen2";
  c["head_dim"] = 24;
  c["use_sliding_window"] = false;
  c["sliding_window"] = 4096;  // present but unused, as Qwen2's configs ship it
  c["layer_types"] = {"full_attention", "full_attention"};
  const ModelConfig m = model_config_from_hf(c, "config.json");
  EXPECT_TRUE(m.qkv_bias);
  EXPECT_EQ(m.resolved_head_dim(), 24);
}

TEST(HfConfig, RefusesWhatTheModelCannotHonourNamingTheField) {
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> cases = {
      {[](auto& c) { c["model_type"] = "gpt2"; }, "model_type: 'gpt2' is not supported"},
      {[](auto& c) { c["rope_parameters"]["rope_type"] = "yarn"; },
       "rope_parameters.rope_type: 'yarn' is not implemented"},
      {[](auto& c) {
         c["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
       },
       "rope_scaling.type: 'linear' is not implemented"},
      {[](auto& c) { c["mlp_bias"] = true; }, "mlp_bias: MLP biases are not implemented"},
      {[](auto& c) { c["attention_bias"] = true; }, "attention_bias:"},
      {[](auto& c) { c["hidden_act"] = "gelu"; }, "hidden_act: 'gelu' is not implemented"},
      {[](auto& c) { c["attention_dropout"] = 0.1; }, "attention_dropout:"},
      {[](auto& c) {
         c["model_type"] = "qwen2";
         c["use_sliding_window"] = true;
       },
       "sliding_window: sliding-window attention is not implemented"},
      {[](auto& c) {
         c["model_type"] = "mistral";
         c["sliding_window"] = 4096;
       },
       "sliding_window:"},
      {[](auto& c) {
         c["layer_types"] = {"full_attention", "sliding_attention"};
       },
       "layer_types: \"sliding_attention\""},
      {[](auto& c) { c["num_key_value_heads"] = 3; }, "num_key_value_heads: 3 does not divide 4"},
      {[](auto& c) { c["hidden_size"] = "64"; }, "hidden_size: must be an integer"},
      {[](auto& c) { c.erase("vocab_size"); }, "vocab_size: missing"},
      {[](auto& c) { c["head_dim"] = 15; }, "head_dim: must be even for RoPE"},
  };
  for (const auto& [edit, expected] : cases) {
    nlohmann::json c = llama();
    edit(c);
    const std::string message = config_refusal(c);
    EXPECT_NE(message.find("DIR/config.json: " + expected), std::string::npos)
        << "expected '" << expected << "' in '" << message << "'";
  }
}

TEST(HfConfig, AWrittenConfigReadsBackAsTheSameModel) {
  ModelConfig m = model_config_from_hf(llama(), "config.json");
  m.qkv_bias = true;
  m.head_dim = 20;
  const nlohmann::json written = hf_config_of(m, nlohmann::json::object(), "float32");
  EXPECT_EQ(written.at("architectures"), nlohmann::json::array({"Qwen2ForCausalLM"}));
  const ModelConfig back = model_config_from_hf(written, "config.json");
  EXPECT_EQ(back.d_model, m.d_model);
  EXPECT_EQ(back.kv_heads(), m.kv_heads());
  EXPECT_EQ(back.resolved_head_dim(), 20);
  EXPECT_EQ(back.qkv_bias, true);
  EXPECT_EQ(back.tie_embeddings, m.tie_embeddings);
  EXPECT_DOUBLE_EQ(back.rope_theta, m.rope_theta);
  EXPECT_DOUBLE_EQ(back.rms_norm_eps, m.rms_norm_eps);
}

TEST(HfConfig, APresetExportsAsALlamaConfig) {
  ModelConfig preset = model_preset("tiny");
  const nlohmann::json c = hf_config_of(preset, nlohmann::json::object(), "float32");
  EXPECT_EQ(c.at("model_type"), "llama");
  EXPECT_EQ(c.at("num_key_value_heads"), preset.num_heads);
  EXPECT_EQ(c.at("head_dim"), preset.d_model / preset.num_heads);
  EXPECT_EQ(count_parameters(model_config_from_hf(c, "config.json")), count_parameters(preset));
}

TEST(HfConfig, ParameterCountKnowsGqaBiasAndTheHead) {
  ModelConfig m = model_config_from_hf(llama(), "config.json");  // tied, GQA 4:2, head 16
  const int64_t block = 2 * 64 + 64 * 64 * 2 + 64 * 32 * 2 + 3 * 64 * 96;
  EXPECT_EQ(count_parameters(m), 300 * 64 + 2 * block + 64);
  m.qkv_bias = true;
  m.tie_embeddings = false;
  EXPECT_EQ(count_parameters(m), 300 * 64 + 2 * (block + 64 + 2 * 32) + 64 + 300 * 64);
}

TEST(HfConfig, InitFromReadsTheShapeAndRefusesAContradictingFlag) {
  const std::string dir = testing::temp_dir() + "/hf-config-test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << llama().dump();
  DdpJobOptions job;
  job.init_from = dir;
  EXPECT_EQ(job.resolved_model().d_model, 64);
  job.num_layers = 2;  // agrees
  EXPECT_EQ(job.resolved_model().num_layers, 2);
  job.num_heads = 8;
  try {
    job.resolved_model();
    ADD_FAILURE() << "--heads 8 was accepted";
  } catch (const OptionError& e) {
    EXPECT_EQ(e.flag(), "--heads");
    EXPECT_NE(std::string(e.what()).find("num_attention_heads 4"), std::string::npos) << e.what();
  }
  job.init_from = dir + "/absent";
  EXPECT_THROW(job.resolved_model(), OptionError);
}

}  // namespace
}  // namespace ddpd
