#include <gtest/gtest.h>

#include <cstdio>
#include <regex>

#include "ddpd/core/model.h"
#include "support/process.h"

namespace ddpd {
namespace {

int64_t numel(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : unique_trainable_parameters(m)) n += p.numel();
  return n;
}

TEST(Model, SmallPresetHasThePeersParameterCount) {
  TransformerLM model(model_preset("small"));
  EXPECT_EQ(numel(*model), 128625408);
}

TEST(Model, TiedHeadSharesTheEmbedding) {
  ModelConfig c = model_preset("tiny");
  c.tie_embeddings = true;
  TransformerLM model(c);
  EXPECT_EQ(numel(*model), count_parameters(c));
  EXPECT_TRUE(model->named_parameters()["head.weight"].is_same(
      model->named_parameters()["embedding.weight"]));
}

TEST(Model, ForwardShapesAndCausality) {
  torch::manual_seed(0);
  TransformerLM model(model_preset("tiny"));
  auto tokens = torch::randint(0, 10000, {2, 12}, torch::kInt64);
  auto logits = model->forward(tokens);
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{2, 12, 10000}));
  // Changing a later token must not change earlier positions' logits.
  auto changed = tokens.clone();
  changed.index_put_({0, 8}, (tokens.index({0, 8}).item<int64_t>() + 1) % 10000);
  auto logits2 = model->forward(changed);
  EXPECT_TRUE(torch::allclose(logits.narrow(1, 0, 8), logits2.narrow(1, 0, 8)));
  EXPECT_FALSE(torch::allclose(logits.narrow(1, 8, 1), logits2.narrow(1, 8, 1)));
  // An untrained LM predicts roughly uniformly: loss near log(vocab).
  const double loss = language_model_loss(logits, tokens).item<double>();
  EXPECT_NEAR(loss, std::log(10000.0), 1.0);
}

// The Python peer builds the same architecture; its parameter count must equal ours.
TEST(Model, ParameterCountEqualsThePythonPeer) {
  const std::string peer = std::string(DDPD_SHARED_DIR) + "/peers/torch_ddp_ref.py";
  if (FILE* f = std::fopen(peer.c_str(), "r")) {
    std::fclose(f);
  } else {
    GTEST_SKIP() << "peer script not found at " << peer;
  }
  // d_model 96, d_ff 160, 3 layers, 4 heads, vocab 500: a shape no preset has.
  auto outcome = testing::run_process(
      {DDPD_PEER_PYTHON, peer, "1", "96", "160", "3", "4", "500", "8", "2", "1"}, {},
      std::chrono::seconds(120));
  ASSERT_EQ(outcome.exit_code, 0) << outcome.err;
  std::smatch match;
  ASSERT_TRUE(std::regex_search(outcome.out, match, std::regex("params=(\\d+)"))) << outcome.out;
  ModelConfig c;
  c.d_model = 96;
  c.d_ff = 160;
  c.num_layers = 3;
  c.num_heads = 4;
  c.vocab_size = 500;
  TransformerLM model(c);
  EXPECT_EQ(numel(*model), std::stoll(match[1]));
  EXPECT_EQ(count_parameters(c), std::stoll(match[1]));
}

}  // namespace
}  // namespace ddpd
