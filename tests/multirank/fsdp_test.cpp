// FSDP: padding when lengths do not divide by N, and gathered parameters equal the originals.
#include "ddpd/grad_sync.h"
#include "multirank/multirank_test_util.h"

namespace ddpd::testing {
namespace {

TEST(FsdpLayout, PadsToAMultipleOfWorldSize) {
  const auto layout = shard_layout(64, 3);  // an RMSNorm gain of the tiny model over 3 ranks
  EXPECT_EQ(layout.numel, 64);
  EXPECT_EQ(layout.shard_numel, 22);
  EXPECT_EQ(layout.padded_numel, 66);
  const auto even = shard_layout(640000, 4);
  EXPECT_EQ(even.shard_numel, 160000);
  EXPECT_EQ(even.padded_numel, 640000);
  const auto tiny = shard_layout(1, 3);
  EXPECT_EQ(tiny.shard_numel, 1);
  EXPECT_EQ(tiny.padded_numel, 3);
}

TEST(FsdpGather, GatheredParametersEqualTheOriginalsOnThreeRanks) {
  // World 3 does not divide the 64-element RMSNorm gains: padding is exercised.
  const std::string prefix =
      run_helper("fsdp-gather", {"--strategy", "fsdp", "--batch", "3", "--steps", "1"}, 3);
  const auto original = load_tensors(rank_file(prefix, 0, "init_local.pt"));
  for (int r = 0; r < 3; ++r) {
    const auto gathered = load_tensors(rank_file(prefix, r, "init_synced.pt"));
    EXPECT_EQ(max_abs_diff(gathered, original), 0) << "rank " << r;
  }
}

}  // namespace
}  // namespace ddpd::testing
