// `ddpctl tune`: short real trials over strategies x bucket sizes x transports x ZeRO-1, pruned by
// the replay and by successive halving (docs/whatif.md#ddpctl-tune). The search itself, with the
// trials and predictions behind callbacks, so that it is tested without daemons
// (tests/unit/tuner_test.cpp); tune.cpp runs the trials as jobs through the coordinator.
//
// The protocol:
//  1. The probe: the first candidate (bucketed 25 MB, the job's transport, no ZeRO-1) runs
//     first; its result is its round-1 trial and the measured job the replay predicts every
//     other candidate from (ProbePlan).
//  2. Bucket sizes: log-spaced outwards from the replay's best size for the probe (x1/10, x1/3,
//     x1, x3, x10, within 0.25-1000 MB), on every transport the host offers.
//  3. Pruning: a candidate predicted slower than the best prediction by more than prune_margin is
//     skipped, with its prediction. fsdp, and transports without a measured link, are not
//     predicted and always run.
//  4. Rounds: every candidate left runs trial_steps steps; the faster half (by median step time,
//     at least one) goes on with twice the steps; until one is left, or the next trial would
//     pass the budget. The winner is the fastest of the last round.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ddpd/common/job_options.h"

namespace ddpd::client {

struct TuneOptions {
  DdpJobOptions base;  // the model, data and training flags; tune varies the sync fields
  int world_size = 2;
  double budget_s = 600;            // wall clock for all trials
  int64_t trial_steps = 6;          // round 1's steps per trial (2 of them warm-up)
  double prune_margin = 0.25;       // skip what the replay predicts this much slower than the best
  bool try_both_transports = true;  // shm and gloo on one host
};

struct TrialResult {
  std::string job_id;
  int64_t steps = 0;
  double median_step_s = 0;
  double std_step_s = 0;
  double exposed_comm_s = 0;
  int64_t peak_bytes = 0;
  double tokens_per_s = 0;
  double wall_s = 0;  // submit to result
};

struct Candidate {
  DdpJobOptions options;
  std::string label;                  // configuration_line()
  std::optional<double> predicted_s;  // the replay's step, when it models the candidate
  std::string skipped;                // why it did not run ("" when it ran)
  std::vector<TrialResult> trials;    // one per round it reached
  int last_round = 0;
};

struct TuneOutcome {
  std::vector<Candidate> candidates;  // ranked: the winner first, then by round and time
  bool cancelled = false;             // a trial was cancelled: the search stopped there
  bool budget_exhausted = false;
  double elapsed_s = 0;
};

// Runs `options` for `steps` steps as one trial; nullopt when the trial was cancelled. Throws on
// a failed trial (the tuner records it as the candidate's reason and goes on).
using RunTrial = std::function<std::optional<TrialResult>(const DdpJobOptions&, int64_t steps)>;
// What the probe's trial tells the search: where to centre the bucket sizes, which transports
// this host offers (the probe's first), and the replay's step for a candidate (nullopt: not
// modeled). tune.cpp builds it from the probe's measured job (ddpd/common/step_replay.h).
struct ProbePlan {
  double advised_bucket_mb = kJobDefaults.bucket_size_mb;
  std::vector<Transport> transports;
  std::function<std::optional<double>(const DdpJobOptions&)> predict;
};
using PlanFromProbe = std::function<ProbePlan(const TrialResult&)>;
// Progress lines.
using Report = std::function<void(const std::string&)>;

TuneOutcome tune(const TuneOptions& options, const RunTrial& run, const PlanFromProbe& plan_from,
                 const Report& report, const std::function<double()>& now);

// The candidates before pruning, for a replay-advised bucket size (exposed for tests).
std::vector<DdpJobOptions> candidate_grid(const TuneOptions& options, double advised_bucket_mb,
                                          const std::vector<Transport>& transports);

}  // namespace ddpd::client
