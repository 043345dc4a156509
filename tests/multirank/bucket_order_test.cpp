// The launch order of overlap and bucketed on a net whose forward order differs from its
// registration order (tests/support/rank_main.cpp, `readiness`): the first step packs in reverse
// registration order, so nothing can launch until backward's end; after it, every rank adopts
// rank 0's ready order and collectives start during backward. A parameter the forward never uses
// is an error naming it, or with --find-unused-parameters is reduced as zeros.
#include "multirank/multirank_test_util.h"

namespace ddpd::testing {
namespace {

constexpr int kOrderSteps = 3;

std::vector<std::string> readiness_flags(const std::string& strategy,
                                         std::vector<std::string> extra) {
  // Float64 (kFloat64Flag): the gradients are compared with one process's across steps.
  // 0.0026 MiB (2726 bytes) buckets: late (2,624 bytes) fills one alone; several buckets in all.
  std::vector<std::string> args{kFloat64Flag,  "--strategy", strategy,
                                "--bucket-mb", "0.0026",     "--batch",
                                "8",           "--steps",    std::to_string(kOrderSteps),
                                "--seed",      "5"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

nlohmann::json steps_of(const std::string& prefix, int rank) {
  return load_json(rank_file(prefix, rank, "json"))["steps"];
}

class LaunchOrder : public ::testing::TestWithParam<std::string> {};

TEST_P(LaunchOrder, AfterTheFirstStepCollectivesFollowBackwardAndEveryRankAgrees) {
  const std::string strategy = GetParam();
  const auto flags = readiness_flags(strategy, {"--with-unused", "--find-unused-parameters"});
  const std::string prefix = run_helper("order-" + strategy, flags, 2, "readiness");
  const std::string single = run_helper("order-single-" + strategy, flags, 1, "readiness");
  const auto rank0 = steps_of(prefix, 0);
  ASSERT_EQ(rank0.size(), static_cast<size_t>(kOrderSteps));
  // Reverse registration puts early's parameters first: nothing is complete before they are.
  EXPECT_EQ(rank0[0]["launched_before_early_gradients"], 0);
  for (int step = 1; step < kOrderSteps; ++step) {
    EXPECT_GE(rank0[step]["launched_before_early_gradients"].get<int>(), 1)
        << "step " << step << ": the rebuilt order should let late's gradients go during backward";
    const auto numels = rank0[step]["all_reduce_numels"];
    // late's 328 elements (weight 320, bias 8) lead (bucketed may add early's bias, 40), and the
    // unused 24 come last.
    const int64_t first = numels.front();
    EXPECT_TRUE(first == 8 || first == 320 || first == 328 || first == 368) << numels;
    EXPECT_EQ(numels.back(), 24) << numels;
  }
  EXPECT_NE(rank0[0]["all_reduce_numels"], rank0[1]["all_reduce_numels"]);
  // Both ranks launch the same sequence, and the gradients are single-process training's, with
  // the unused parameter's all zeros.
  EXPECT_EQ(steps_of(prefix, 1), rank0);
  for (int step = 0; step < kOrderSteps; ++step) {
    const std::string file = "grads" + std::to_string(step) + ".pt";
    const auto grads = load_tensors(rank_file(prefix, 0, file));
    EXPECT_LT(max_relative_diff(grads, load_tensors(rank_file(single, 0, file))),
              kGradientRelativeBound)
        << "step " << step;
    EXPECT_EQ(grads.front().numel(), 24);  // the root's own parameter is registered first
    EXPECT_EQ(grads.front().abs().max().item<double>(), 0) << "the unused parameter's gradient";
  }
}

TEST_P(LaunchOrder, StaticBucketsKeepReverseRegistrationOrder) {
  const std::string strategy = GetParam();
  const std::string prefix = run_helper(
      "static-" + strategy,
      readiness_flags(strategy, {"--with-unused", "--find-unused-parameters", "--static-buckets"}),
      2, "readiness");
  const auto rank0 = steps_of(prefix, 0);
  for (int step = 0; step < kOrderSteps; ++step) {
    EXPECT_EQ(rank0[step]["launched_before_early_gradients"], 0) << "step " << step;
    EXPECT_EQ(rank0[step]["all_reduce_numels"], rank0[0]["all_reduce_numels"]) << "step " << step;
  }
}

// A parameter used in one step and not the next: zero_grad drops the gradients and leaves the
// bucket holding the last step's average, so an unused parameter must be reduced (and stepped)
// as zeros, not as that stale average. Used on step 1 only: step 0's buckets are rebuilt, so
// step 2 is the first to reuse a bucket that held its gradient.
TEST_P(LaunchOrder, AParameterUnusedAfterAUsedStepIsReducedAsZeros) {
  const std::string strategy = GetParam();
  const auto flags = readiness_flags(
      strategy, {"--with-unused", "--find-unused-parameters", "--use-unused-on-odd-steps"});
  const std::string prefix = run_helper("sometimes-" + strategy, flags, 2, "readiness");
  const std::string single = run_helper("sometimes-single-" + strategy, flags, 1, "readiness");
  for (int step = 0; step < kOrderSteps; ++step) {
    const std::string file = "grads" + std::to_string(step) + ".pt";
    for (int rank = 0; rank < 2; ++rank) {
      const auto grads = load_tensors(rank_file(prefix, rank, file));
      EXPECT_LT(max_relative_diff(grads, load_tensors(rank_file(single, 0, file))),
                kGradientRelativeBound)
          << "step " << step << " rank " << rank;
      const auto unused = grads.front();  // registered first, 24 elements; 8 used on odd steps
      ASSERT_EQ(unused.numel(), 24);
      const double used_part = unused.narrow(0, 0, 8).abs().max().item<double>();
      if (step % 2 == 1) {
        EXPECT_GT(used_part, 0) << "step " << step << " rank " << rank;
      } else {
        EXPECT_EQ(used_part, 0) << "step " << step << " rank " << rank << ": a stale gradient";
      }
      EXPECT_EQ(unused.narrow(0, 8, 16).abs().max().item<double>(), 0);
    }
  }
}

TEST_P(LaunchOrder, AnUnusedParameterIsAnErrorNamingIt) {
  const std::string strategy = GetParam();
  std::vector<std::string> argv{rank_helper(), "readiness", "--out",
                                temp_dir() + "/unused-" + strategy};
  for (const auto& f : readiness_flags(strategy, {"--with-unused"})) argv.push_back(f);
  const auto outcomes = run_ranks(argv, 2, std::chrono::seconds(60));
  for (size_t r = 0; r < outcomes.size(); ++r) {
    EXPECT_EQ(outcomes[r].exit_code, 1) << "rank " << r;
    EXPECT_NE(outcomes[r].err.find("got no gradient in this step's backward ('unused')"),
              std::string::npos)
        << outcomes[r].err;
    EXPECT_NE(outcomes[r].err.find("--find-unused-parameters"), std::string::npos);
  }
}

INSTANTIATE_TEST_SUITE_P(OnEachTransport, LaunchOrder, ::testing::Values("overlap", "bucketed"));

}  // namespace
}  // namespace ddpd::testing
