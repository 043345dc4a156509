// The whatif replay's machinery (ddpd/common/step_replay.h), on a profile written by hand: a
// link of alpha 1 ms, 1 GB/s and a quarter of that speed while the rank computes; four gradients
// of 4, 2, 1.5 and 0.5 MB (registration order) ready at 100, 70, 50 and 20 ms of a 100 ms
// backward. (Bucket sizes 15x apart, so that alpha can be fitted.)
// Every expected figure below is worked out by hand from those numbers (the comments show the
// arithmetic), so the tolerances are float rounding only. Accuracy against real runs is the
// job of tests/bench/bench_whatif.sh, not of this test.
#include <gtest/gtest.h>

#include "ddpd/common/median.h"
#include "ddpd/common/shard_owners.h"
#include "ddpd/common/step_replay.h"

namespace ddpd {
namespace {

// Largest first, each to the least-loaded rank, lowest rank on ties; the balance carries over
// to the next group. Worked by hand: bytes 5 3 8 1 on 2 ranks go 8→0, 5→1, 3→1, 1→0.
TEST(ShardOwners, GreedyBalanceLargestFirstLowestRankOnTiesAcrossGroups) {
  std::vector<int64_t> owned(2, 0);
  EXPECT_EQ(assign_shard_owners({5, 3, 8, 1}, owned), (std::vector<int>{1, 1, 0, 0}));
  EXPECT_EQ(owned, (std::vector<int64_t>{9, 8}));
  EXPECT_EQ(assign_shard_owners({4, 4}, owned),
            (std::vector<int>{1, 0}));  // 4→1 (8 < 9), 4→0 (9 < 12)
  EXPECT_EQ(owned, (std::vector<int64_t>{13, 12}));
  std::vector<int64_t> three(3, 0);
  EXPECT_EQ(assign_shard_owners({2, 2, 2}, three),
            (std::vector<int>{0, 1, 2}));  // ties: index order
}

TEST(Median, MiddleValueMeanOfTheTwoMiddleAndZeroWhenEmpty) {
  EXPECT_EQ(median({}), 0.0);
  EXPECT_EQ(median({3.0, 1.0, 2.0}), 2.0);
  EXPECT_EQ(median({4.0, 1.0, 3.0, 2.0}), 2.5);
}

constexpr double kMs = 1e-3;
constexpr double kTight = 1e-9;  // seconds: float rounding of sums of a few milliseconds

// Step A: g3 ready at 20 ms. Backward [51, 151] ms. bucket0 = {g3} (g2 would pass the 1 MiB
// first cap): launched at 71, 1.5 ms of work at 0.25 while backward runs → done at 77. bucket1 =
// {g2, g1, g0}, 7.5 MB, launched at 151: 8.5 ms of work; AdamW for bucket0 runs [151, 151.75]
// (12 ms × 0.5/8) at 0.25 → 0.1875 ms done, 8.3125 left at full speed → 160.0625; AdamW for
// bucket1 [160.0625, 171.3125]; synced then. Step = zero_grad 1 + forward 50 + backward 100 +
// wait 20.3125 + residual 2 = 173.3125 ms.
// Step B: g3 ready at 98 ms: bucket0 launched at 149, 2 ms of backward at 0.25 → 0.5 ms done,
// 1 ms after → 152; AdamW [152, 152.75]; bucket1 from 152: 0.1875 during it, 8.3125 after →
// 161.0625; AdamW [161.0625, 172.3125]; synced then, step 174.3125.
ProfiledStep profiled(int64_t step, double g3_ready_ms) {
  const bool late = g3_ready_ms > 50;  // step B
  ProfiledStep s;
  s.step = step;
  s.zero_grad_s = 1 * kMs;
  s.forward_s = 50 * kMs;
  s.backward_s = 100 * kMs;
  s.last_backward_start_s = 51 * kMs;
  s.last_backward_end_s = 151 * kMs;
  s.optimizer_s = s.overlapped_optimizer_s = 12 * kMs;
  s.synced_s = (late ? 172.3125 : 171.3125) * kMs;
  s.step_s = (late ? 174.3125 : 173.3125) * kMs;
  s.ready_s = {100 * kMs, 70 * kMs, 50 * kMs, g3_ready_ms * kMs};
  s.collectives = {{"all_reduce/bucket0", Collective::kAllReduce, 500000, (51 + g3_ready_ms) * kMs,
                    (late ? 152 : 77) * kMs},
                   {"all_reduce/bucket1", Collective::kAllReduce, 7500000, 151 * kMs,
                    (late ? 161.0625 : 160.0625) * kMs}};
  return s;
}

MeasuredJob hand_written_job() {
  MeasuredJob job;
  job.job_id = "hand";
  job.world_size = 2;
  job.options.strategy = Strategy::kBucketed;
  job.options.bucket_size_mb = 25;
  job.options.batch_size = 8;
  job.options.warmup_steps = 0;
  job.options.threads = 1;
  job.result.transport = GroupTransport::kShm;
  job.result.profile.host_cores = 2;
  job.result.profile.gradients = {
      {"g0", 4000000}, {"g1", 2000000}, {"g2", 1500000}, {"g3", 500000}};
  // A, B, A: every median is step A's, and the three kinds of all-reduce fix the link's fit.
  job.result.profile.steps = {profiled(0, 20), profiled(1, 98), profiled(2, 20)};
  for (const auto& s : job.result.profile.steps) {
    StepMetrics m;
    m.step = s.step;
    m.step_seconds = s.step_s;
    job.result.steps.push_back(m);
  }
  return job;
}

TEST(StepReplay, TheLinkFitRecoversAlphaBetaAndTheSpeedWhileComputing) {
  const LinkModel link = fit_link_from_job(hand_written_job());
  EXPECT_NEAR(link.alpha_s, 1 * kMs, kTight);
  EXPECT_NEAR(link.seconds_per_byte, 1e-9, 1e-15);
  EXPECT_NEAR(link.speed_while_computing, 0.25, 1e-9);
  EXPECT_EQ(link.samples, 6);
  EXPECT_EQ(link.world_size, 2);
  EXPECT_EQ(link.transport, GroupTransport::kShm);
}

// Every all-reduce wholly inside backward and none waited on: the split fit has nothing to go
// on (waiting is 0 everywhere), so the link falls back to each service's cost per byte at full
// speed: g = sum(bytes x service) / sum(bytes^2) = (4e6 x 20 ms + 5e6 x 30 ms) / (16e12 + 25e12)
// = 2.3e5 / 4.1e13 s per byte, and speed 1. (The same three steps each: the ratio is per step.)
TEST(StepReplay, ALinkWhoseSplitFitFailsFallsBackToTheWholeService) {
  MeasuredJob job = hand_written_job();
  for (auto& step : job.result.profile.steps) {
    step.overlapped_optimizer_s = 0;  // no AdamW inside the synchronisation
    step.collectives = {
        {"all_reduce/bucket0", Collective::kAllReduce, 4000000, 61 * kMs, 81 * kMs},
        {"all_reduce/bucket1", Collective::kAllReduce, 5000000, 91 * kMs, 121 * kMs}};
  }
  const LinkModel link = fit_link_from_job(job);
  EXPECT_EQ(link.alpha_s, 0);
  EXPECT_NEAR(link.seconds_per_byte, (4e6 * 0.020 + 5e6 * 0.030) / (16e12 + 25e12), 1e-20);
  EXPECT_EQ(link.speed_while_computing, 1.0);
}

TEST(StepReplay, TheJobsOwnConfigurationReproducesItsMeasuredStep) {
  const MeasuredJob job = hand_written_job();
  const StepFigures f = predict(job, {});
  EXPECT_NEAR(f.step_s, 173.3125 * kMs, kTight);  // step A, the median
  // The wait after backward, less the 12 ms of AdamW inside it.
  EXPECT_NEAR(f.exposed_comm_s, 8.3125 * kMs, kTight);
  // Each all-reduce's service: bucket0 [20, 26] and bucket1 [100, 109.0625] of the backward.
  EXPECT_NEAR(f.comm_s, 15.0625 * kMs, kTight);
  EXPECT_NEAR(f.optimizer_s, 12 * kMs, kTight);
  EXPECT_NEAR(f.step_s, measured_figures(job).step_s, kTight);
}

TEST(StepReplay, OneBucketForEveryGradientPredictsNoOverlap) {
  // Gradients of 300, 100, 100 and 300 KB: 800 KB, under the 1 MiB first cap, so any bucket size
  // puts them in one bucket, launched when the last is ready, at the end of backward. The link
  // is given (a comm job's): alpha 1 ms, 1 GB/s.
  MeasuredJob job = hand_written_job();
  job.result.profile.gradients = {{"g0", 300000}, {"g1", 100000}, {"g2", 100000}, {"g3", 300000}};
  LinkModel link;
  link.transport = GroupTransport::kShm;
  link.world_size = 2;
  link.alpha_s = 1 * kMs;
  link.seconds_per_byte = 1e-9;
  for (double mb : {1.0, 25.0, 1000.0}) {
    WhatIfChange change;
    change.bucket_size_mb = mb;
    const StepFigures f = predict(job, change, link);
    // All of the all-reduce (1 ms + 0.8 ms) waits after backward; then AdamW (12 ms).
    EXPECT_NEAR(f.comm_s, 1.8 * kMs, kTight) << mb << " MB";
    EXPECT_NEAR(f.exposed_comm_s, f.comm_s, kTight) << mb << " MB: nothing overlapped";
  }
}

TEST(StepReplay, ZeroOneStepsItsShareAndQueuesItsBroadcastsBehindTheAllReduces) {
  // Owners by size: 4 MB to rank 0, then 2, 1.5 and 0.5 MB to rank 1: rank 0 owns half (6 ms of
  // AdamW). bucket0 done at 26 ms (after the last backward's start) as before; AdamW for it
  // [100, 100.375]; bucket1 from 100: 0.09375 ms during it, 8.40625 after → 108.78125; AdamW
  // [108.78125, 114.40625]. Broadcasts move half an all-reduce's bytes: bucket0's (1 + 0.25 ms)
  // from 108.78125, inside that AdamW at 0.25 → 113.78125; bucket1's (1 + 3.75 ms) from 114.40625
  // → 119.15625. Wait 14.40625, then 4.75 for the broadcasts: step 1 + 50 + 100 + 14.40625 +
  // 4.75 + 2 = 172.15625.
  WhatIfChange change;
  change.shard_optimizer = true;
  const StepFigures f = predict(hand_written_job(), change);
  EXPECT_NEAR(f.step_s, 172.15625 * kMs, kTight);
  EXPECT_NEAR(f.exposed_comm_s, 13.15625 * kMs, kTight);  // 14.40625 - 6 of AdamW + 4.75
  EXPECT_NEAR(f.optimizer_s, 10.75 * kMs, kTight);        // 6 of AdamW + the 4.75 ms wait
}

TEST(StepReplay, ComputeFollowsTheLocalBatchAndTheCoresEachRankGets) {
  const MeasuredJob job = hand_written_job();
  WhatIfChange one;
  one.world_size = 1;
  const StepFigures alone = predict(job, one);
  // Twice the rows on one rank; no synchroniser (no zero_grad of buckets, no communication):
  // 100 + 200 + AdamW 12 + residual 2.
  EXPECT_NEAR(alone.forward_s, 100 * kMs, kTight);
  EXPECT_NEAR(alone.step_s, 314 * kMs, kTight);
  EXPECT_EQ(alone.comm_s, 0);
  EXPECT_EQ(alone.exposed_comm_s, 0);
  EXPECT_EQ(alone.transport, GroupTransport::kNone);
  // Four ranks of one thread on two cores: half the rows each, at half a core each.
  WhatIfChange four;
  four.world_size = 4;
  EXPECT_NEAR(predict(job, four).forward_s, 50 * kMs, kTight);
}

TEST(StepReplay, RefusesWhatItCannotModelWithTheReason) {
  const MeasuredJob job = hand_written_job();
  auto refusal = [&](const WhatIfChange& change, const MeasuredJob& j) -> std::string {
    try {
      predict(j, change);
    } catch (const ReplayRefused& e) {
      return e.what();
    }
    return "";
  };
  WhatIfChange fsdp;
  fsdp.strategy = Strategy::kFsdp;
  EXPECT_NE(refusal(fsdp, job).find("fsdp is not replayed"), std::string::npos);
  WhatIfChange gloo;
  gloo.transport = Transport::kGloo;
  EXPECT_NE(refusal(gloo, job).find("--link-from"), std::string::npos) << refusal(gloo, job);
  MeasuredJob on_gpu = job;
  on_gpu.options.device = Device::kCuda;
  EXPECT_NE(refusal({}, on_gpu).find("CPU jobs only"), std::string::npos);
  MeasuredJob unprofiled = job;
  unprofiled.result.profile = {};
  EXPECT_NE(refusal({}, unprofiled).find("no step profile"), std::string::npos);
  // A configuration the job could not run is bad input, named as submit names it.
  WhatIfChange three;
  three.world_size = 3;
  try {
    predict(job, three);
    ADD_FAILURE() << "a global batch of 8 on 3 ranks was accepted";
  } catch (const OptionError& e) {
    EXPECT_EQ(e.flag(), "--batch");
  }
}

}  // namespace
}  // namespace ddpd
