// `ddpctl whatif`: one measured job's step replayed under another configuration — another
// strategy, bucket size, world size, transport, ZeRO-1 or gradient accumulation — without running
// it (docs/whatif.md). Plain arithmetic on the job's StepProfile; unit-tested
// (tests/unit/step_replay_test.cpp) and checked against real runs (tests/bench/bench_whatif.sh).
//
// The replay, in order:
//  1. The base: medians over the profiled steps after warm-up of every phase, of each gradient's
//     ready time as a fraction of the last backward, and of what is left of the step (the
//     residual: gather, bookkeeping).
//  2. The link: alpha + bytes x seconds_per_byte per all-reduce, at a fraction of that speed
//     while the rank computes, fitted from the job's own all-reduces (each one's service: from
//     when the transport was free of the collective before it, since it runs one at a time and
//     in order, to its completion; split into the time the rank computed and the time it
//     waited), scaled to another world size as a ring's bytes scale (2(N-1)/N per byte, N-1
//     steps); or given, from a comm job, for another transport.
//  3. Compute per rank follows the local batch, and the share of the host's cores each rank
//     gets when ranks x threads exceed them.
//  4. The last backward again: gradients ready at their fractions, grouped and launched as the
//     target strategy does (bucketed: assign_buckets in ready order, a bucket launched once full
//     and after the one before), queued one at a time on the link. AdamW per bucket as each
//     lands (bucketed on CPU), and ZeRO-1's per-bucket broadcasts, queued after the all-reduces.
//  5. The step: zero_grad + forward + backward + the wait after backward + the optimizer after
//     the synchronisation + the residual.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "ddpd/common/comm_options.h"
#include "ddpd/common/job_options.h"
#include "ddpd/common/memory_estimate.h"
#include "ddpd/common/training_result.h"

namespace ddpd {

// A measured DDP job: its options, world size and result (with its StepProfile).
struct MeasuredJob {
  std::string job_id;
  DdpJobOptions options;
  int world_size = 1;
  TrainingResult result;
};

// What changes; everything else stays as the measured job ran.
struct WhatIfChange {
  std::optional<Strategy> strategy;
  std::optional<double> bucket_size_mb;
  std::optional<int> world_size;
  std::optional<Transport> transport;
  std::optional<bool> shard_optimizer;
  std::optional<int64_t> grad_accum;
};

// One all-reduce of `bytes` per rank, at world_size ranks: alpha_s + bytes x seconds_per_byte
// while the rank's training thread waits, progressing at speed_while_computing of that while it
// computes (backward, AdamW): the transport's threads and compute share the cores.
struct LinkModel {
  GroupTransport transport = GroupTransport::kNone;
  int world_size = 0;
  double alpha_s = 0;
  double seconds_per_byte = 0;
  double speed_while_computing = 1.0;
  int samples = 0;
  double rms_relative_error = 0;
  std::string source;  // "14 all-reduces of job 3f2a…", "comm job 9c1e…"
};

// One configuration's figures, measured or predicted.
struct StepFigures {
  DdpJobOptions options;
  int world_size = 1;
  GroupTransport transport = GroupTransport::kNone;  // as it ran (or would run)
  double step_s = 0;
  double forward_s = 0;
  double backward_s = 0;
  double optimizer_s = 0;
  double comm_s = 0;          // collectives in flight
  double exposed_comm_s = 0;  // the step waited on them
  double comm_fraction = 0;
  double tokens_per_s = 0;
  RankMemoryEstimate memory;  // the modeled parts, per rank
  // Peak per rank: measured; predicted as the measured peak plus the modeled parts' change.
  int64_t peak_bytes = 0;
};

// Why a configuration cannot be replayed; the message says what would make it possible.
class ReplayRefused : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The measured job's figures (medians over its steps after warm-up; memory as it ran).
StepFigures measured_figures(const MeasuredJob& job);

// The link from the job's own all-reduces (ReplayRefused when it has fewer than two, or none
// of two sizes).
LinkModel fit_link_from_job(const MeasuredJob& job);
// The link from a comm job's all-reduce fit (ReplayRefused when it measured no all-reduce).
LinkModel link_from_comm_job(const CommBenchResult& result, const std::string& job_id);

// The predicted figures. `link`: the transport's model (at any world size; it is scaled);
// without it, the job's own fit, which only predicts the transport the job ran on. Throws
// ReplayRefused for what the replay cannot model, and OptionError (naming the flag) for a
// configuration the job could not run (a batch the world size does not divide).
StepFigures predict(const MeasuredJob& job, const WhatIfChange& change,
                    const std::optional<LinkModel>& link = std::nullopt);

// The link a prediction queues its collectives on: `given` (from a comm job) or the job's own
// fit, scaled to the change's world size. ReplayRefused when neither measured its transport.
LinkModel replay_link(const MeasuredJob& job, const WhatIfChange& change,
                      const std::optional<LinkModel>& given = std::nullopt);

// The bucketed strategy replayed at each of kSweepBucketMb, and the size of the fastest
// predicted step: `ddpctl plan bucket --job` and the centre of `ddpctl tune`'s sizes.
constexpr double kSweepBucketMb[] = {1, 2.5, 5, 10, 25, 50, 100, 250, 1000};
struct BucketSweep {
  std::vector<std::pair<double, StepFigures>> points;  // (MB, figures)
  double best_mb = 0;
};
BucketSweep bucket_sweep(const MeasuredJob& job);

// The transport a change runs on: `auto` and unchanged mean the measured job's own.
GroupTransport target_transport(const MeasuredJob& job, const WhatIfChange& change);

// What the replay does not predict, for the report and the docs.
const std::vector<std::string>& replay_limits();

}  // namespace ddpd
