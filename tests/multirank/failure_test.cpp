// A rank that dies or hangs makes the others fail with an error, within the timeout, not hang.
#include "multirank/multirank_test_util.h"

namespace ddpd::testing {
namespace {

std::vector<ProcessOutcome> run_faulty(const std::string& fault, const std::string& strategy) {
  const std::string prefix = temp_dir() + "/fault-" + fault + "-" + strategy;
  std::vector<std::string> argv{rank_helper(),
                                "--out",
                                prefix,
                                "--model",
                                "tiny",
                                "--context",
                                "16",
                                "--batch",
                                "4",
                                "--steps",
                                "50",
                                "--strategy",
                                strategy,
                                "--timeout",
                                "5",
                                "--" + fault + "-at",
                                "2"};
  return run_ranks(argv, 2, std::chrono::seconds(60));
}

class RankFailure : public ::testing::TestWithParam<std::string> {};

TEST_P(RankFailure, DeadRankMakesSurvivorFail) {
  const auto start = std::chrono::steady_clock::now();
  const auto outcomes = run_faulty("die", GetParam());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(outcomes[1].exit_code, 3);
  EXPECT_FALSE(outcomes[0].timed_out) << "rank 0 hung after its peer died";
  EXPECT_EQ(outcomes[0].exit_code, 1) << outcomes[0].err;
  EXPECT_NE(outcomes[0].err.find("collective"), std::string::npos) << outcomes[0].err;
  EXPECT_LT(seconds, 30);
}

TEST_P(RankFailure, HungRankMakesSurvivorTimeOut) {
  const auto start = std::chrono::steady_clock::now();
  const auto outcomes = run_faulty("hang", GetParam());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_FALSE(outcomes[0].timed_out) << "rank 0 hung instead of timing out";
  EXPECT_EQ(outcomes[0].exit_code, 1) << outcomes[0].err;
  EXPECT_NE(outcomes[0].err.find("timeout 5000 ms"), std::string::npos) << outcomes[0].err;
  EXPECT_EQ(outcomes[1].exit_code, 4);  // the hung rank gives up by itself after 20 s
  EXPECT_LT(seconds, 45);
}

INSTANTIATE_TEST_SUITE_P(Strategies, RankFailure, ::testing::Values("naive", "bucketed"));

}  // namespace
}  // namespace ddpd::testing
