// plan_sharded_heal (heal/state_transfer.h, step 2'): the step a ZeRO-1 job with
// --shard-replicas 1 goes on at, where its parameters come from, and which shards must move.
// Rank r owns shard r; its ring successor r + 1 holds the replica.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "heal/state_transfer.h"

namespace ddpd::detail {
namespace {

constexpr RankProgress kJoins{-1, -1};

RankProgress clean(int64_t steps) { return {steps, steps}; }
// Updated its shards for the next step, then failed in the parameters' broadcasts.
RankProgress dirty(int64_t completed) { return {completed, completed + 1}; }

TEST(ShardedHealPlan, ALostRanksShardComesFromItsSuccessorAndTheSpareTakesItsPredecessors) {
  // Rank 1 of 3 was lost at step 5: the spare owns shard 1 (held by rank 2) and holds shard 0's
  // replica (owned by rank 0). Shard 2's owner and holder both have it: it does not move.
  const ShardedHealPlan plan = plan_sharded_heal({clean(5), kJoins, clean(5)});
  EXPECT_EQ(plan.target_step, 5);
  EXPECT_EQ(plan.state_source, 0);
  EXPECT_TRUE(plan.source_at_target);
  EXPECT_EQ(plan.shard_provider, (std::vector<int>{0, 2, 2}));
  EXPECT_EQ(plan.moments_move, (std::vector<bool>{true, true, false}));
}

TEST(ShardedHealPlan, TheLastRanksShardWrapsToRankZero) {
  const ShardedHealPlan plan = plan_sharded_heal({clean(3), clean(3), clean(3), kJoins});
  EXPECT_EQ(plan.state_source, 0);
  EXPECT_EQ(plan.shard_provider, (std::vector<int>{0, 1, 2, 0}));
  EXPECT_EQ(plan.moments_move, (std::vector<bool>{false, false, true, true}));
}

TEST(ShardedHealPlan, RanksLostMidBroadcastGoOnAfterTheStepTheirShardsHold) {
  // Rank 1 died while the parameters' broadcasts of step 5 ran: both survivors had updated
  // their shards (counts 5 and 6), and rank 2's replica holds rank 1's shard at 6. No rank's
  // parameters are all at 6, so each shard's come from its provider after rank 0's.
  const ShardedHealPlan plan = plan_sharded_heal({dirty(5), kJoins, dirty(5)});
  EXPECT_EQ(plan.target_step, 6);
  EXPECT_EQ(plan.state_source, 0);
  EXPECT_FALSE(plan.source_at_target);
  EXPECT_EQ(plan.shard_provider, (std::vector<int>{0, 2, 2}));
  EXPECT_EQ(plan.moments_move, (std::vector<bool>{true, true, false}));
}

TEST(ShardedHealPlan, ARankThatUpdatedPastTheStepTakesItsOwnShardBackFromItsHolder) {
  // Rank 0 updated its shards past step 6 and failed mid-broadcast; ranks 1 and 2 are clean at
  // 6, and rank 3 joins. Shard 3's only copy at 6 would be rank 0's replica, which rank 0 updated
  // too, and shard 1 is at 7 nowhere: no step has every shard.
  EXPECT_THROW(plan_sharded_heal({dirty(6), clean(6), clean(6), kJoins}), std::runtime_error);
  // With rank 2 the one lost instead, step 6 is whole: rank 0 takes its shard back from rank 1,
  // and the parameters come from rank 1, the lowest rank whose parameters are all at 6.
  const ShardedHealPlan plan = plan_sharded_heal({dirty(6), clean(6), kJoins, clean(6)});
  EXPECT_EQ(plan.target_step, 6);
  EXPECT_EQ(plan.state_source, 1);
  EXPECT_TRUE(plan.source_at_target);
  EXPECT_EQ(plan.shard_provider, (std::vector<int>{1, 1, 3, 3}));
  EXPECT_EQ(plan.moments_move, (std::vector<bool>{true, true, true, true}));
}

TEST(ShardedHealPlan, ShardsAtNoCommonStepAreRefusedNamingEveryRanksCounts) {
  // At step 5 shard 1's holder (rank 2) is at 4; at step 4 shard 0's owner is at 5 and its
  // holder joins.
  try {
    plan_sharded_heal({clean(5), kJoins, clean(4)});
    FAIL() << "accepted a plan with a shard at no common step";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 completed 5 updated 5, rank 1 completed -1 "
                                         "updated -1, rank 2 completed 4 updated 4"),
              std::string::npos)
        << e.what();
  }
}

TEST(ShardedHealPlan, NoRankWithStateIsRefused) {
  EXPECT_THROW(plan_sharded_heal({kJoins, kJoins}), std::runtime_error);
}

}  // namespace
}  // namespace ddpd::detail
