// The CPU tiled FlashAttention-2 against naive attention: values and gradients, causal and
// not, lengths that no tile size divides, bf16 inputs, and the model with either attention.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "ddpd/core/model.h"
#include "ddpd/kernels/flash_attention.h"
#include "support/relative_error.h"

namespace ddpd {
namespace {

using kernels::flash_attention;
using kernels::FlashAttentionOptions;
using kernels::naive_attention;
using testing::relative_error;

struct Case {
  int64_t t, d, block_q, block_k;
  bool causal;
};

class FlashVsNaive : public ::testing::TestWithParam<Case> {};

// The algorithm, checked in float64 as the equivalence suites are: tiling changes only the order
// of the sums, so flash and naive attention agree to float64's roundoff. The bound is the float32
// worst case derived below (about 2e-4 at these shapes, relative to the largest value) scaled by
// float64's unit roundoff, 2^-29 of float32's (4e-13), with a margin of 25; a real fault (a wrong
// mask, scale or rescaling) moves the values by 1e-2 or more.
constexpr double kFloat64Bound = 1e-11;
// Errors relative to the largest value, or absolute where it is below 1.
constexpr double kFloor = 1.0;

TEST_P(FlashVsNaive, ValuesAndGradientsMatchInFloat64) {
  const Case c = GetParam();
  torch::manual_seed(7);
  const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
  auto make = [&] { return torch::randn({2, 3, c.t, c.d}, f64.requires_grad(true)); };
  auto q = make(), k = make(), v = make();
  auto weights = torch::randn({2, 3, c.t, c.d}, f64);  // a loss that weighs every output apart

  auto flash = flash_attention(q, k, v, FlashAttentionOptions{c.causal, c.block_q, c.block_k});
  EXPECT_EQ(flash.scalar_type(), torch::kDouble);
  (flash * weights).sum().backward();
  auto fq = q.grad().clone(), fk = k.grad().clone(), fv = v.grad().clone();
  q.mutable_grad().reset();
  k.mutable_grad().reset();
  v.mutable_grad().reset();
  auto naive = naive_attention(q, k, v, c.causal);
  (naive * weights).sum().backward();

  EXPECT_LT(relative_error(flash, naive, kFloor), kFloat64Bound);
  EXPECT_LT(relative_error(fq, q.grad(), kFloor), kFloat64Bound);
  EXPECT_LT(relative_error(fk, k.grad(), kFloor), kFloat64Bound);
  EXPECT_LT(relative_error(fv, v.grad(), kFloor), kFloat64Bound);
}

// float32, what users run: within the worst case of float32 error analysis, against the exact
// (float64) result, and naive attention within the same bound (a check of the bound). With
// u = 2^-24 and γ_n = n·u / (1 − n·u):
// - each score q·k/√d is off by at most ε = (γ_d + u)·S, S = max Σ_l |q_l|·|k_l| / √d;
// - a softmax of scores each off by ε moves by a factor within e^±2ε, and its exp, the sum of
//   t terms and the division round: relative error 2ε + γ_(t+3);
// - the output Σ_j p_j v_j adds γ_t of Σ_j p_j |v_j| ≤ max|v|, and the tiled form's rescalings
//   at most two roundings per key: together at most (2ε + γ_(4t+3))·max|v|.
TEST_P(FlashVsNaive, Float32ValuesWithinTheDerivedBound) {
  const Case c = GetParam();
  torch::manual_seed(11);
  auto q = torch::randn({2, 3, c.t, c.d}), k = torch::randn({2, 3, c.t, c.d}),
       v = torch::randn({2, 3, c.t, c.d});
  const auto exact =
      naive_attention(q.to(torch::kDouble), k.to(torch::kDouble), v.to(torch::kDouble), c.causal);
  const double u = std::ldexp(1.0, -24);
  auto gamma = [u](double n) { return n * u / (1 - n * u); };
  const double d = static_cast<double>(c.d), t = static_cast<double>(c.t);
  const double s =
      torch::matmul(q.abs().to(torch::kDouble), k.abs().to(torch::kDouble).transpose(-1, -2))
          .max()
          .item<double>() /
      std::sqrt(d);
  const double epsilon = (gamma(d) + u) * s;
  const double bound = (2 * epsilon + gamma(4 * t + 3)) * v.abs().max().item<double>();
  const auto flash =
      flash_attention(q, k, v, FlashAttentionOptions{c.causal, c.block_q, c.block_k});
  const double flash_error = (flash.to(torch::kDouble) - exact).abs().max().item<double>();
  const double naive_error =
      (naive_attention(q, k, v, c.causal).to(torch::kDouble) - exact).abs().max().item<double>();
  std::printf(
      "[ float32  ] t %lld d %lld: |flash - exact| %.2e, |naive - exact| %.2e, bound %.2e\n",
      static_cast<long long>(c.t), static_cast<long long>(c.d), flash_error, naive_error, bound);
  EXPECT_LT(flash_error, bound);
  EXPECT_LT(naive_error, bound);
  // One token's output is its value, exactly; longer ones round somewhere.
  if (c.t > 1) EXPECT_GT(flash_error, 0) << "float32 flash matched float64 exactly: not float32?";
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

// The model gives the same logits and gradients with any attention (flash, and sdpa:
// at::scaled_dot_product_attention, the CUDA default), in float64 (bound as above: summation
// order only).
TEST(FlashAttention, ModelMatchesNaiveAttention) {
  struct DefaultDtype {  // float64 for this test only; the next test gets float32 back
    DefaultDtype() { torch::set_default_dtype(caffe2::TypeMeta::Make<double>()); }
    ~DefaultDtype() { torch::set_default_dtype(caffe2::TypeMeta::Make<float>()); }
  } float64;
  ModelConfig config = model_preset("tiny");
  config.vocab_size = 300;
  auto tokens = torch::randint(0, 300, {2, 40});
  auto run = [&](Attention attention) {
    torch::manual_seed(11);
    config.attention = attention;
    TransformerLM model(config);
    auto logits = model->forward(tokens);
    language_model_loss(logits, tokens).backward();
    std::vector<torch::Tensor> grads;
    for (auto& p : model->parameters()) grads.push_back(p.grad().clone());
    return std::make_tuple(logits.detach(), grads);
  };
  auto [naive_logits, naive_grads] = run(Attention::kNaive);
  for (Attention attention : {Attention::kFlash, Attention::kSdpa}) {
    SCOPED_TRACE(enum_name(attention));
    auto [logits, grads] = run(attention);
    EXPECT_EQ(logits.scalar_type(), torch::kDouble);
    EXPECT_LT(relative_error(logits, naive_logits, kFloor), kFloat64Bound);
    ASSERT_EQ(grads.size(), naive_grads.size());
    for (size_t i = 0; i < grads.size(); ++i) {
      EXPECT_LT(relative_error(grads[i], naive_grads[i], kFloor), kFloat64Bound)
          << "parameter " << i;
    }
  }
}

}  // namespace
}  // namespace ddpd
