// The fused AdamW loop against torch::optim::AdamW: the same parameters after several steps, with
// and without weight decay, contiguous (fused) and strided (the tensor-op fallback).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>

#include "ddpd/kernels/fused_adamw.h"

namespace ddpd::kernels {
namespace {

void expect_matches_torch(double weight_decay, bool strided) {
  torch::manual_seed(3);
  const auto start = strided ? torch::randn({64, 40}).t() : torch::randn({2561});
  auto reference = start.clone().set_requires_grad(true);
  torch::optim::AdamW torch_adamw(
      {reference},
      torch::optim::AdamWOptions(0.01).betas({0.8, 0.95}).eps(1e-6).weight_decay(weight_decay));
  auto param = start.clone();
  if (strided) param = torch::randn({64, 40}).t().copy_(start);  // same values, strided
  auto exp_avg = torch::zeros_like(param), exp_avg_sq = torch::zeros_like(param);
  const AdamWHyperparameters h{0.01, 0.8, 0.95, 1e-6, weight_decay};
  for (int64_t step = 1; step <= 6; ++step) {
    const auto grad = torch::randn_like(start) * (step % 2 ? 1e-3 : 1.0);  // tiny and large
    reference.mutable_grad() = grad.clone();
    torch_adamw.step();
    adamw_update(param, grad, exp_avg, exp_avg_sq, step, h);
  }
  const double moved = (reference.detach() - start).abs().max().item<double>();
  ASSERT_GT(moved, 1e-3) << "the parameters did not move";
  // The same float32 arithmetic in the same order; only vectorised rounding may differ, by a few
  // units in the last place of the parameters (a wrong formula would be off by a fraction of
  // what the steps moved them).
  const double largest = reference.detach().abs().max().item<double>();
  EXPECT_LT((param - reference.detach()).abs().max().item<double>(),
            4 * std::numeric_limits<float>::epsilon() * largest);
}

TEST(FusedAdamW, MatchesTorchAdamW) { expect_matches_torch(0.05, false); }
TEST(FusedAdamW, MatchesTorchAdamWWithoutWeightDecay) { expect_matches_torch(0, false); }
TEST(FusedAdamW, StridedTensorsTakeTheTensorOpPath) { expect_matches_torch(0.05, true); }

}  // namespace
}  // namespace ddpd::kernels

namespace ddpd::kernels {
namespace {

// The multi-tensor path (torch's fused kernel, what CUDA parameters take) with our
// hyper-parameters mapped onto its arguments: against torch::optim::AdamW on CPU, where the
// kernel also runs. Several tensors of different sizes, each with its own step count.
TEST(FusedAdamW, MultiTensorPathMatchesTorchAdamW) {
  torch::manual_seed(5);
  const std::vector<torch::Tensor> start = {torch::randn({300}), torch::randn({7, 9})};
  std::vector<torch::Tensor> reference, params, exp_avgs, exp_avg_sqs;
  for (const auto& s : start) {
    reference.push_back(s.clone().set_requires_grad(true));
    params.push_back(s.clone());
    exp_avgs.push_back(torch::zeros_like(s));
    exp_avg_sqs.push_back(torch::zeros_like(s));
  }
  torch::optim::AdamW torch_adamw(
      reference, torch::optim::AdamWOptions(0.02).betas({0.85, 0.97}).eps(1e-7).weight_decay(0.1));
  const AdamWHyperparameters h{0.02, 0.85, 0.97, 1e-7, 0.1};
  for (int64_t step = 1; step <= 5; ++step) {
    std::vector<torch::Tensor> grads;
    for (size_t i = 0; i < start.size(); ++i) {
      grads.push_back(torch::randn_like(start[i]));
      reference[i].mutable_grad() = grads.back().clone();
    }
    torch_adamw.step();
    adamw_update_multi_tensor(params, grads, exp_avgs, exp_avg_sqs, {step, step}, h);
  }
  for (size_t i = 0; i < start.size(); ++i) {
    const auto expected = reference[i].detach();
    ASSERT_GT((expected - start[i]).abs().max().item<double>(), 1e-3) << "did not move";
    // float32 arithmetic in another order (torch's fused kernel): a few units in the last place
    // of the parameters; a wrongly mapped argument is off by a fraction of the distance moved.
    EXPECT_LT((params[i] - expected).abs().max().item<double>(),
              8 * std::numeric_limits<float>::epsilon() * expected.abs().max().item<double>());
  }
  EXPECT_THROW(adamw_update_multi_tensor(params, {}, exp_avgs, exp_avg_sqs, {1, 1}, h),
               std::invalid_argument);
}

}  // namespace
}  // namespace ddpd::kernels
