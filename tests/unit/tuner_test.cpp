// The tune search (client/src/tuner.h) with fake trials and predictions: the grid around the
// advised bucket size, pruning by prediction, successive halving with doubling steps, the budget
// and cancellation. The real trials through a coordinator are tests/e2e/tune_test.cpp's.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "tuner.h"

namespace ddpd::client {
namespace {

// A host where bucketed at 10 MB on shm is fastest (100 ms, 1 ms more per factor of 2 away),
// ZeRO-1 costs 2 ms, overlap 104, flat 106, fsdp 103, naive 190, and gloo 30 ms more. The
// prediction is the truth, except that fsdp is not modeled.
double truth(const DdpJobOptions& o) {
  double ms = 0;
  switch (o.strategy) {
    case Strategy::kBucketed:
      ms = 100 + std::abs(std::log2(o.bucket_size_mb / 10));
      break;
    case Strategy::kOverlap:
      ms = 104;
      break;
    case Strategy::kFlat:
      ms = 106;
      break;
    case Strategy::kFsdp:
      ms = 103;
      break;
    default:
      ms = 190;
  }
  return (ms + (o.shard_optimizer ? 2 : 0) + (o.transport == Transport::kGloo ? 30 : 0)) * 1e-3;
}

struct Fake {
  double clock = 0;
  std::vector<std::pair<std::string, int64_t>> runs;  // (label, steps)
  int cancel_at = -1;                                 // the trial that gets cancelled

  TuneOutcome search(TuneOptions options) {
    options.world_size = 2;
    return tune(
        options,
        [&](const DdpJobOptions& o, int64_t steps) -> std::optional<TrialResult> {
          if (static_cast<int>(runs.size()) == cancel_at) return std::nullopt;
          runs.push_back({enum_name(o.strategy) + std::to_string(o.bucket_size_mb), steps});
          TrialResult r;
          r.job_id = "job-" + std::to_string(runs.size());
          r.steps = steps;
          r.median_step_s = truth(o);
          r.wall_s = 1 + steps * r.median_step_s;
          clock += r.wall_s;
          return r;
        },
        [](const TrialResult&) {
          ProbePlan plan;
          plan.advised_bucket_mb = 10;
          plan.transports = {Transport::kShm, Transport::kGloo};
          plan.predict = [](const DdpJobOptions& o) -> std::optional<double> {
            if (o.strategy == Strategy::kFsdp) return std::nullopt;
            return truth(o);
          };
          return plan;
        },
        [](const std::string&) {}, [&] { return clock; });
  }
};

TEST(Tuner, GridCentresTheBucketSizesOnTheAdvisedOneAndLeavesZeroOneOffFsdp) {
  TuneOptions options;
  options.world_size = 2;
  const auto grid = candidate_grid(options, 10, {Transport::kShm});
  std::vector<double> sizes;
  int fsdp = 0;
  for (const auto& o : grid) {
    if (o.strategy == Strategy::kBucketed && !o.shard_optimizer) sizes.push_back(o.bucket_size_mb);
    if (o.strategy == Strategy::kFsdp) {
      ++fsdp;
      EXPECT_FALSE(o.shard_optimizer);
    }
  }
  // 10 x 1/10, 1/3, 1, 3, 10, in quarter-MB steps.
  EXPECT_EQ(sizes, (std::vector<double>{1, 3.25, 10, 30, 100}));
  EXPECT_EQ(fsdp, 1);
  EXPECT_EQ(grid.size(), 5u * 2 + 3 * 2 + 1);  // bucketed sizes and the others, ZeRO-1 on/off
}

TEST(Tuner, PrunesPredictedLosersThenHalvesWithDoublingStepsToTheFastest) {
  Fake fake;
  TuneOptions options;
  options.trial_steps = 4;
  options.budget_s = 1e9;
  const TuneOutcome outcome = fake.search(options);
  ASSERT_FALSE(outcome.candidates.empty());
  const Candidate& winner = outcome.candidates.front();
  EXPECT_EQ(winner.options.strategy, Strategy::kBucketed);
  EXPECT_EQ(winner.options.bucket_size_mb, 10);
  EXPECT_EQ(winner.options.transport, Transport::kShm);
  EXPECT_FALSE(winner.options.shard_optimizer);
  // Best prediction 100 ms; with a 25% margin everything over 125 ms is skipped unrun: naive,
  // and every gloo candidate (130 ms and more).
  int skipped = 0;
  for (const auto& c : outcome.candidates) {
    const bool predicted = c.options.strategy != Strategy::kFsdp;  // fsdp is not modeled: it runs
    const bool slow = predicted && (c.options.strategy == Strategy::kNaive ||
                                    c.options.transport == Transport::kGloo);
    if (c.label.find("25 MB") != std::string::npos && c.trials.size()) continue;  // the probe
    EXPECT_EQ(!c.skipped.empty(), slow) << c.label << ": " << c.skipped;
    skipped += !c.skipped.empty();
  }
  EXPECT_GT(skipped, 0);
  // Round 1 ran 4 steps each; every later round ran twice the steps of the one before.
  std::map<int64_t, int> trials_by_steps;
  for (const auto& [label, steps] : fake.runs) ++trials_by_steps[steps];
  int64_t previous = 0;
  int previous_count = 1 << 30;
  for (const auto& [steps, count] : trials_by_steps) {
    if (previous) EXPECT_EQ(steps, 2 * previous);
    EXPECT_LE(count, previous_count);  // fewer, or as many, each round
    previous = steps;
    previous_count = count;
  }
  EXPECT_EQ(trials_by_steps.begin()->first, 4);
  EXPECT_FALSE(outcome.cancelled);
  EXPECT_FALSE(outcome.budget_exhausted);
}

TEST(Tuner, StopsAtTheBudgetAndOnCancellationKeepingWhatRan) {
  Fake over_budget;
  TuneOptions options;
  options.trial_steps = 4;
  options.budget_s = 10;  // a probe (1.4 s) and a few more trials
  const TuneOutcome cut = over_budget.search(options);
  EXPECT_TRUE(cut.budget_exhausted);
  EXPECT_FALSE(cut.candidates.front().trials.empty());
  EXPECT_LE(over_budget.clock, options.budget_s + 1 + 4 * 0.2);  // no trial started past it

  Fake cancelled;
  cancelled.cancel_at = 3;  // the fourth trial
  const TuneOutcome stopped = cancelled.search(TuneOptions{});
  EXPECT_TRUE(stopped.cancelled);
  EXPECT_EQ(cancelled.runs.size(), 3u);
}

}  // namespace
}  // namespace ddpd::client
