#include <gtest/gtest.h>

#include "ddpd/core/grad_sync.h"
#include "ddpd/core/trainer.h"

namespace ddpd {
namespace {

using Buckets = std::vector<std::vector<size_t>>;

TEST(BucketAssignment, ReverseOrderUnderTheCap) {
  // float32 sizes 400, 400, 400, 400 bytes with a 1000-byte cap: two per bucket, last first.
  EXPECT_EQ(assign_buckets({100, 100, 100, 100}, 4, 1000), (Buckets{{3, 2}, {1, 0}}));
}

TEST(BucketAssignment, ParameterLargerThanTheCapGetsItsOwnBucket) {
  EXPECT_EQ(assign_buckets({10, 1000, 10, 10}, 4, 100), (Buckets{{3, 2}, {1}, {0}}));
}

TEST(BucketAssignment, ExactFitStaysInOneBucket) {
  EXPECT_EQ(assign_buckets({25, 25, 25, 25}, 4, 400), (Buckets{{3, 2, 1, 0}}));
  EXPECT_EQ(assign_buckets({25, 25, 25, 26}, 4, 400), (Buckets{{3, 2, 1}, {0}}));
}

TEST(BucketAssignment, HugeCapIsOneBucketAndEveryParameterAppearsOnce) {
  std::vector<int64_t> numels(57);
  for (size_t i = 0; i < numels.size(); ++i) numels[i] = 1 + (i * 7919) % 1000;
  EXPECT_EQ(assign_buckets(numels, 4, int64_t{1} << 40).size(), 1u);
  const auto buckets = assign_buckets(numels, 4, 2000);
  EXPECT_GT(buckets.size(), 1u);
  std::vector<int> seen(numels.size(), 0);
  size_t expected_next = numels.size() - 1;
  for (const auto& b : buckets) {
    int64_t bytes = 0;
    for (size_t i : b) {
      ++seen[i];
      EXPECT_EQ(i, expected_next--);  // reverse registration order throughout
      bytes += numels[i] * 4;
    }
    EXPECT_TRUE(bytes <= 2000 || b.size() == 1);
  }
  for (int count : seen) EXPECT_EQ(count, 1);
}

TEST(BucketAssignment, GivenOrderWithASmallerFirstBucket) {
  // 400-byte parameters in the order 1, 3, 0, 2: the first bucket takes one (cap 500), the rest
  // two per bucket (cap 1000).
  EXPECT_EQ(assign_buckets({1, 3, 0, 2}, {100, 100, 100, 100}, 4, 1000, 500),
            (Buckets{{1}, {3, 0}, {2}}));
  EXPECT_EQ(assign_buckets({1, 3, 0, 2}, {100, 100, 100, 100}, 4, 1000, 1000),
            (Buckets{{1, 3}, {0, 2}}));
}

TEST(Summary, MedianAndStdOverTimedStepsOnly) {
  std::vector<StepMetrics> steps(5);
  const double times[] = {9.0, 9.0, 1.0, 3.0, 2.0};
  for (int i = 0; i < 5; ++i) {
    steps[i].step = i;
    steps[i].step_seconds = times[i];
    steps[i].comm_fraction = 0.1 * i;
    steps[i].loss = 10 - i;
    steps[i].tokens_per_second = 100 / times[i];
  }
  steps[3].param_spread = 2e-7;
  const auto s = summarize(steps, 2);
  EXPECT_DOUBLE_EQ(s.median_step_seconds, 2.0);
  EXPECT_DOUBLE_EQ(s.std_step_seconds, 1.0);
  EXPECT_DOUBLE_EQ(s.median_comm_fraction, 0.3);
  ASSERT_TRUE(s.final_loss.has_value());
  EXPECT_DOUBLE_EQ(*s.final_loss, 6);
  EXPECT_DOUBLE_EQ(s.max_param_spread, 2e-7);
  EXPECT_DOUBLE_EQ(s.tokens_per_second, 50);
}

}  // namespace
}  // namespace ddpd
