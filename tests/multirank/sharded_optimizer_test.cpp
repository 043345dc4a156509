// ZeRO-1's ShardedOptimizer as a unit (ddpd-test-rank zero1: the same synthetic gradients on
// every rank, no model step): state only for owned parameters, ownership balanced by size,
// add_param_group after construction, and the same updates as unsharded AdamW. Its use inside
// training is covered by the strategy equivalence suite (the *_zero1 cases).
#include "multirank/multirank_test_util.h"

namespace ddpd::testing {
namespace {

std::vector<std::string> flags(bool shard, bool in_parts = false) {
  std::vector<std::string> f{"--batch", "6",    "--steps",        "10",      "--seed",
                             "3",       "--lr", "0.01",           "--beta1", "0.85",
                             "--beta2", "0.99", "--add-group-at", "2"};
  if (shard) f.push_back("--shard-optimizer");
  if (in_parts) f.push_back("--in-parts");
  return f;
}

class ShardedOptimizerTest : public ::testing::TestWithParam<int> {};

TEST_P(ShardedOptimizerTest, MatchesUnshardedAdamWWithGroupAddedMidRun) {
  const int world = GetParam();
  const std::string sharded = run_helper("zero1-sharded", flags(true), world, "zero1");
  const std::string plain = run_helper("zero1-plain", flags(false), world, "zero1");
  const auto expected = load_tensors(rank_file(plain, 0, "final.pt"));
  const auto init = load_tensors(rank_file(plain, 0, "init_synced.pt"));
  for (int r = 0; r < world; ++r) {
    const auto got = load_tensors(rank_file(sharded, r, "final.pt"));
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
      // 1e-6 relative: the same gradients through the same AdamW arithmetic.
      const double scale = expected[i].abs().max().item<double>();
      EXPECT_LE((got[i] - expected[i]).abs().max().item<double>(), 1e-6 * scale + 1e-12)
          << "rank " << r << " parameter " << i;
    }
  }
  // The parameters added in the later group were trained too.
  EXPECT_GT((expected.back() - init.back()).abs().max().item<double>(), 1e-4);
}

// step_part() per bucket-like part (the owners' fused AdamW, broadcasts launched per part) and
// finish_step(): the same parameters as unsharded AdamW on every rank.
TEST_P(ShardedOptimizerTest, SteppedInPartsMatchesUnshardedAdamW) {
  const int world = GetParam();
  const std::string parts = run_helper("zero1-parts", flags(true, true), world, "zero1");
  const std::string plain = run_helper("zero1-plain-ref", flags(false), world, "zero1");
  const auto expected = load_tensors(rank_file(plain, 0, "final.pt"));
  for (int r = 0; r < world; ++r) {
    const auto got = load_tensors(rank_file(parts, r, "final.pt"));
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
      // 1e-6 relative, as above: the fused kernel evaluates torch's AdamW formula in float.
      const double scale = expected[i].abs().max().item<double>();
      EXPECT_LE((got[i] - expected[i]).abs().max().item<double>(), 1e-6 * scale + 1e-12)
          << "rank " << r << " parameter " << i;
    }
  }
}

TEST_P(ShardedOptimizerTest, StateOnlyForOwnedParametersAndBalancedBySize) {
  const int world = GetParam();
  const std::string prefix = run_helper("zero1-state", flags(true), world, "zero1");
  std::vector<int64_t> owned;
  int64_t total_state = 0;
  for (int r = 0; r < world; ++r) {
    const auto report = load_json(rank_file(prefix, r, "json"));
    EXPECT_EQ(report["state_entries"], report["owned_param_count"]) << "rank " << r;
    // AdamW keeps two moments per owned element.
    EXPECT_EQ(report["state_bytes"].get<int64_t>(), 2 * report["owned_bytes"].get<int64_t>())
        << "rank " << r;
    EXPECT_GT(report["owned_param_count"].get<int>(), 0) << "rank " << r << " owns nothing";
    owned.push_back(report["owned_bytes"].get<int64_t>());
    total_state += report["state_bytes"].get<int64_t>();
    // Every rank computes the same assignment.
    EXPECT_EQ(report["owned_bytes_per_rank"],
              load_json(rank_file(prefix, 0, "json"))["owned_bytes_per_rank"]);
  }
  const auto report = load_json(rank_file(prefix, 0, "json"));
  EXPECT_EQ(total_state, 2 * report["trainable_bytes"].get<int64_t>());
  // Greedy largest-first balance: no two ranks differ by more than the largest parameter
  // (which, here, is bounded by the two 2.5 MiB embedding-sized matrices).
  const auto [lo, hi] = std::minmax_element(owned.begin(), owned.end());
  EXPECT_LE(*hi - *lo, report["largest_param_bytes"].get<int64_t>());
}

INSTANTIATE_TEST_SUITE_P(OnEachTransport, ShardedOptimizerTest, ::testing::Values(2, 3));

}  // namespace
}  // namespace ddpd::testing
