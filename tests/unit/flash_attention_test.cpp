// The CPU tiled FlashAttention-2 against naive attention: values and gradients, causal and
// not, lengths that no tile size divides, bf16 inputs, and the model with either attention.
#include <gtest/gtest.h>

#include <tuple>

#include "ddpd/kernels/flash_attention.h"
#include "ddpd/model.h"

namespace ddpd {
namespace {

using kernels::flash_attention;
using kernels::FlashAttentionOptions;
using kernels::naive_attention;

struct Case {
  int64_t t, d, block_q, block_k;
  bool causal;
};

class FlashVsNaive : public ::testing::TestWithParam<Case> {};

TEST_P(FlashVsNaive, ValuesAndGradientsMatch) {
  const Case c = GetParam();
  torch::manual_seed(7);
  auto make = [&] { return torch::randn({2, 3, c.t, c.d}, torch::requires_grad()); };
  auto q = make(), k = make(), v = make();
  auto weights = torch::randn({2, 3, c.t, c.d});  // a loss that weighs every output differently

  auto flash = flash_attention(q, k, v, FlashAttentionOptions{c.causal, c.block_q, c.block_k});
  (flash * weights).sum().backward();
  auto fq = q.grad().clone(), fk = k.grad().clone(), fv = v.grad().clone();
  q.mutable_grad().reset();
  k.mutable_grad().reset();
  v.mutable_grad().reset();
  auto naive = naive_attention(q, k, v, c.causal);
  (naive * weights).sum().backward();

  EXPECT_TRUE(torch::allclose(flash, naive, 1e-5, 1e-5))
      << (flash - naive).abs().max().item<double>();
  EXPECT_TRUE(torch::allclose(fq, q.grad(), 1e-4, 1e-5)) << (fq - q.grad()).abs().max();
  EXPECT_TRUE(torch::allclose(fk, k.grad(), 1e-4, 1e-5)) << (fk - k.grad()).abs().max();
  EXPECT_TRUE(torch::allclose(fv, v.grad(), 1e-4, 1e-5)) << (fv - v.grad()).abs().max();
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, FlashVsNaive,
    ::testing::Values(Case{1, 8, 4, 4, true},    // one token
                      Case{37, 16, 8, 8, true},  // 37 = 4 tiles of 8 and a row
                      Case{37, 16, 8, 8, false}, Case{64, 32, 16, 32, true},  // unequal tiles
                      Case{64, 32, 32, 16, false},
                      Case{130, 16, 64, 48, true},    // a last tile of 2 / 34 rows
                      Case{130, 16, 200, 200, true},  // one tile larger than the sequence
                      Case{50, 8, 7, 5, false}),
    [](const auto& info) {
      const Case& c = info.param;
      return "t" + std::to_string(c.t) + "_d" + std::to_string(c.d) + "_bq" +
             std::to_string(c.block_q) + "_bk" + std::to_string(c.block_k) +
             (c.causal ? "_causal" : "_full");
    });

TEST(FlashAttention, Bf16InputsAccumulateInFloat) {
  torch::manual_seed(3);
  auto q = torch::randn({2, 4, 45, 16}), k = torch::randn({2, 4, 45, 16}),
       v = torch::randn({2, 4, 45, 16});
  auto reference = naive_attention(q, k, v, true);
  auto out = flash_attention(q.to(torch::kBFloat16), k.to(torch::kBFloat16), v.to(torch::kBFloat16),
                             FlashAttentionOptions{true, 16, 16});
  EXPECT_EQ(out.scalar_type(), torch::kBFloat16);
  // bf16 has 8 bits of mantissa: the inputs' rounding bounds the error, not the accumulation.
  EXPECT_LT((out.to(torch::kFloat32) - reference).abs().max().item<double>(), 3e-2);
}

TEST(FlashAttention, RejectsMismatchedShapesAndBadTiles) {
  auto a = torch::randn({2, 8, 4}), b = torch::randn({2, 9, 4});
  EXPECT_THROW(flash_attention(a, b, a), std::invalid_argument);
  EXPECT_THROW(flash_attention(a, a, a, FlashAttentionOptions{true, 0, 4}), std::invalid_argument);
}

// The model gives the same logits and gradients with either attention.
TEST(FlashAttention, ModelMatchesNaiveAttention) {
  ModelConfig config = model_preset("tiny");
  config.vocab_size = 300;
  auto tokens = torch::randint(0, 300, {2, 40});
  auto run = [&](bool flash) {
    torch::manual_seed(11);
    config.flash_attention = flash;
    TransformerLM model(config);
    auto logits = model->forward(tokens);
    language_model_loss(logits, tokens).backward();
    std::vector<torch::Tensor> grads;
    for (auto& p : model->parameters()) grads.push_back(p.grad().clone());
    return std::make_tuple(logits.detach(), grads);
  };
  auto [naive_logits, naive_grads] = run(false);
  auto [flash_logits, flash_grads] = run(true);
  EXPECT_TRUE(torch::allclose(flash_logits, naive_logits, 1e-4, 1e-5));
  ASSERT_EQ(flash_grads.size(), naive_grads.size());
  for (size_t i = 0; i < flash_grads.size(); ++i) {
    EXPECT_TRUE(torch::allclose(flash_grads[i], naive_grads[i], 1e-3, 1e-5)) << "parameter " << i;
  }
}

}  // namespace
}  // namespace ddpd
