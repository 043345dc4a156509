// kernels::warm_up_vector_math() (vector_math_warm_up.h): a fresh process's first parallel unary
// ops give the same bits as its later ones. The fault is MKL's kernel choice racing on the first
// call, so it shows only in fresh processes: the test runs a storm of them.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "ddpd/kernels/flash_attention.h"
#include "ddpd/kernels/vector_math_warm_up.h"
#include "support/process.h"

namespace ddpd {
namespace {

// Measured on a 2-core host without the warm-up: 7 of 150 fresh processes, one at a time, got a
// first call wrong, so 64 catch the fault with probability 1 - (143/150)^64 ≈ 0.95 (it failed 2 of
// 3 runs without the warm-up, under load). Two at a time caught it far less often: the children's
// threads then rarely run at once. On a host without the race all pass, as they should.
constexpr int kProcesses = 64;

// The child: the ops of flash attention's first tile in float64 and float32, each first call
// against a second one, bit for bit. Disabled: only the storm below runs it, once per process.
TEST(VectorMathWarmUp, DISABLED_FirstCallsOfAFreshProcess) {
  kernels::warm_up_vector_math();
  torch::manual_seed(7);
  for (const auto dtype : {torch::kFloat64, torch::kFloat32}) {
    const auto options = torch::TensorOptions().dtype(dtype);
    auto q = torch::randn({6, 64, 32}, options), k = torch::randn({6, 64, 32}, options);
    // 6·32·16 = 3072 scores: over LibTorch's grain of 2048, so two threads take a chunk each.
    auto scores = torch::bmm(q.narrow(1, 0, 32), k.narrow(1, 0, 16).transpose(1, 2));
    for (const auto& op : std::vector<torch::Tensor (*)(const torch::Tensor&)>{
             torch::exp, torch::tanh, torch::erf, torch::sin}) {
      const auto first = op(scores), second = op(scores);
      EXPECT_TRUE(torch::equal(first, second)) << torch::toString(dtype);
    }
    const auto positive = scores.abs() + 1;
    EXPECT_TRUE(torch::equal(positive.log(), positive.log())) << torch::toString(dtype);
    EXPECT_TRUE(torch::equal(positive.sqrt(), positive.sqrt())) << torch::toString(dtype);
  }
  const kernels::FlashAttentionOptions tiles{false, 32, 16};
  auto q = torch::randn({2, 3, 64, 32}), k = torch::randn({2, 3, 64, 32}),
       v = torch::randn({2, 3, 64, 32});
  EXPECT_TRUE(torch::equal(kernels::flash_attention(q, k, v, tiles),
                           kernels::flash_attention(q, k, v, tiles)));
}

testing::ProcessOutcome run_child() {
  return testing::run_process(
      {testing::binary_dir() + "/ddpd_unit_tests", "--gtest_also_run_disabled_tests",
       "--gtest_filter=VectorMathWarmUp.DISABLED_FirstCallsOfAFreshProcess"},
      {}, std::chrono::seconds(60));
}

TEST(VectorMathWarmUp, EveryFreshProcessGetsTheSameBitsOnItsFirstCall) {
  int failed = 0;
  std::string first_failure;
  for (int started = 0; started < kProcesses; ++started) {
    const auto outcome = run_child();
    if (outcome.exit_code != 0 && failed++ == 0) first_failure = outcome.out + outcome.err;
  }
  EXPECT_EQ(failed, 0) << "of " << kProcesses << " fresh processes; the first:\n" << first_failure;
}

}  // namespace
}  // namespace ddpd
