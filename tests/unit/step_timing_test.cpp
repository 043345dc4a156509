// A step's figures from its marks and collective spans, by hand: the arithmetic that decides
// what step, forward, backward, optimizer, communication and exposed communication mean.
// Marks are dyadic rationals, so every difference below is exact in double.
#include <gtest/gtest.h>

#include "train/step_timing.h"

namespace ddpd::detail {
namespace {

// Two micro-batches: zero_grad [0, 0.25], gather [0.25, 0.5], forward [0.5, 1], backward [1, 2],
// forward [2, 2.5], backward [2.5, 4], the wait [4, 5], 0.5 s of memory measurement, the
// optimizer [5.5, 6].
StepMarks two_micro_batches() {
  StepMarks m;
  m.start = 0;
  m.zeroed = 0.25;
  m.gathered = 0.5;
  m.micro_marks = {0.5, 1, 2, 2.5, 4};
  m.synced = 5;
  m.optimizer_start = 5.5;
  m.end = 6;
  m.measure_seconds = 0.5;
  return m;
}

TEST(StepTiming, PhasesAndExposedCommunicationByHand) {
  const std::vector<CommSpan> collectives{
      {"all_reduce/bucket0", Collective::kAllReduce, 1.5, 3, 1000},
      {"all_reduce/bucket1", Collective::kAllReduce, 2.75, 4.5, 500},
      {"broadcast/init", Collective::kBroadcast, 0, 0.125, 7},
      {"reduce_scatter/unit0", Collective::kReduceScatter, 5.75, 7, 64}};
  const StepTiming t = step_timing(two_micro_batches(), collectives);
  EXPECT_EQ(t.step_seconds, 5.5);  // 6 - 0 less the 0.5 s measurement
  EXPECT_EQ(t.forward_seconds, 0.5 + 0.5);
  EXPECT_EQ(t.backward_seconds, 1 + 1.5);
  EXPECT_EQ(t.optimizer_seconds, 0.5);
  // The spans' union within [0, 6]: [0, 0.125] + [1.5, 4.5] + [5.75, 6].
  EXPECT_EQ(t.comm_seconds, 0.125 + 3 + 0.25);
  // Gather 0.25 plus the wait after backward 1.
  EXPECT_EQ(t.exposed_comm_seconds, 1.25);
  EXPECT_EQ(t.gradient_sync_bytes, 1000 + 500 + 64);  // all_reduce and reduce_scatter only
  ASSERT_EQ(t.phases.size(), 8u);
  EXPECT_STREQ(t.phases[4].name, "forward");
  EXPECT_EQ(t.phases[4].begin, 2);
  EXPECT_STREQ(t.phases[6].name, "wait");
  EXPECT_EQ(t.phases[6].begin, 4);
  EXPECT_EQ(t.phases[6].end, 5);
}

// AdamW run inside the synchronisation is optimizer time, not exposed communication; ZeRO-1's
// broadcast inside the optimizer step is exposed communication.
TEST(StepTiming, OverlappedOptimizerAndBroadcastMoveBetweenFigures) {
  StepMarks m = two_micro_batches();
  m.overlapped_optimizer_seconds = 0.75;
  m.broadcast_seconds = 0.125;
  const StepTiming t = step_timing(m, {});
  EXPECT_EQ(t.optimizer_seconds, 0.5 + 0.75);
  EXPECT_EQ(t.exposed_comm_seconds, 0.25 + (1 - 0.75) + 0.125);
  EXPECT_EQ(t.comm_seconds, 0);
}

TEST(StepTiming, MetricsGetTheFractionTheRateAndOnlyNonEmptySpans) {
  StepMarks m = two_micro_batches();
  m.zeroed = m.start;  // an empty zero_grad phase is not a span
  const std::vector<CommSpan> collectives{
      {"all_reduce/bucket0", Collective::kAllReduce, 1.5, 3, 1000}};
  StepMetrics metrics;
  apply_step_timing(
      step_timing(m, collectives), collectives, /*global_tokens=*/1100,
      [](double s) { return 100 + s; }, metrics);
  EXPECT_EQ(metrics.comm_fraction, (0.5 + 1) / 5.5);  // gather 0.5 and wait 1 over 5.5 s
  EXPECT_EQ(metrics.tokens_per_second, 1100 / 5.5);
  ASSERT_EQ(metrics.spans.size(), 7u + 1u);  // 8 phases less the empty one, plus the collective
  EXPECT_EQ(metrics.spans.front().name, "gather");
  EXPECT_EQ(metrics.spans.front().begin_unix_s, 100);
  EXPECT_TRUE(metrics.spans.back().communication);
  EXPECT_EQ(metrics.spans.back().end_unix_s, 103);
}

}  // namespace
}  // namespace ddpd::detail
