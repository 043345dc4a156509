#include "tuner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "whatif_report.h"  // configuration_line

namespace ddpd::client {
namespace {

constexpr double kSmallestBucketMb = 0.25;
constexpr double kLargestBucketMb = 1000;

std::string label_of(const DdpJobOptions& options, int world_size) {
  StepFigures f;
  f.options = options;
  f.world_size = world_size;
  // The tune's trials run on one host, where auto means shared memory.
  f.transport = world_size <= 1                         ? GroupTransport::kNone
                : options.transport == Transport::kGloo ? GroupTransport::kGloo
                                                        : GroupTransport::kShm;
  return configuration_line(f);
}

std::string milliseconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f ms", seconds * 1e3);
  return text;
}

bool same_configuration(const DdpJobOptions& a, const DdpJobOptions& b) {
  return a.strategy == b.strategy && a.transport == b.transport &&
         a.shard_optimizer == b.shard_optimizer &&
         (a.strategy != Strategy::kBucketed || a.bucket_size_mb == b.bucket_size_mb);
}

// Step 3: predictions, and the candidates they rule out.
void predict_and_prune(std::vector<Candidate>& candidates, const ProbePlan& plan, double margin) {
  std::optional<double> best;
  for (auto& c : candidates) {
    c.predicted_s = plan.predict(c.options);  // nullopt: not modeled (fsdp...), so it runs
    if (c.predicted_s) best = std::min(best.value_or(*c.predicted_s), *c.predicted_s);
  }
  for (auto& c : candidates) {
    if (!c.predicted_s || !best || *c.predicted_s <= *best * (1 + margin)) continue;
    c.skipped = "predicted " + milliseconds(*c.predicted_s) + ", " +
                std::to_string(static_cast<int>(std::round(100 * (*c.predicted_s / *best - 1)))) +
                "% slower than the best prediction";
  }
}

struct Search {
  const TuneOptions& options;
  const RunTrial& run;
  const Report& report;
  const std::function<double()>& now;
  double start = 0;
  TuneOutcome outcome;

  // One trial of `c` at `round`; false when the search must stop (cancelled, budget).
  bool trial(Candidate& c, int round, int64_t steps) {
    if (!c.trials.empty() && c.last_round == round) return true;  // the probe's round 1
    const double per_step = c.trials.empty() ? 0 : c.trials.back().wall_s / c.trials.back().steps;
    const double estimate = per_step > 0 ? per_step * steps : 0;
    if (now() - start + estimate > options.budget_s) {
      outcome.budget_exhausted = true;
      return false;
    }
    std::optional<TrialResult> result;
    try {
      result = run(c.options, steps);
    } catch (const std::exception& e) {
      c.skipped = std::string("failed: ") + e.what();
      report("round " + std::to_string(round) + ": " + c.label + ": " + c.skipped);
      return true;
    }
    if (!result) {
      outcome.cancelled = true;
      return false;
    }
    c.trials.push_back(*result);
    c.last_round = round;
    report("round " + std::to_string(round) + ": " + c.label + ": " +
           milliseconds(result->median_step_s) + " (" + result->job_id + ", " +
           std::to_string(steps) + " steps)");
    return true;
  }

  // Step 4: rounds of successive halving over the candidates that were not skipped.
  void rounds(std::vector<Candidate>& candidates) {
    std::vector<Candidate*> alive;
    for (auto& c : candidates) {
      if (c.skipped.empty()) alive.push_back(&c);
    }
    int64_t steps = options.trial_steps;
    for (int round = 1; !alive.empty(); ++round, steps *= 2) {
      for (Candidate* c : alive) {
        if (!trial(*c, round, steps)) return;
      }
      std::vector<Candidate*> ran;
      for (Candidate* c : alive) {
        if (c->skipped.empty() && c->last_round == round) ran.push_back(c);
      }
      std::stable_sort(ran.begin(), ran.end(), [](const Candidate* a, const Candidate* b) {
        return a->trials.back().median_step_s < b->trials.back().median_step_s;
      });
      if (ran.size() <= 1) return;
      ran.resize(std::max<size_t>(1, ran.size() / 2));
      alive = ran;
    }
  }
};

void rank(std::vector<Candidate>& candidates) {
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) {
                     const bool a_ran = !a.trials.empty(), b_ran = !b.trials.empty();
                     if (a_ran != b_ran) return a_ran;
                     if (!a_ran)
                       return a.predicted_s.value_or(INFINITY) < b.predicted_s.value_or(INFINITY);
                     if (a.last_round != b.last_round) return a.last_round > b.last_round;
                     return a.trials.back().median_step_s < b.trials.back().median_step_s;
                   });
}

}  // namespace

std::vector<DdpJobOptions> candidate_grid(const TuneOptions& options, double advised_bucket_mb,
                                          const std::vector<Transport>& transports) {
  std::vector<DdpJobOptions> grid;
  if (options.world_size <= 1) return {options.base};  // nothing to synchronise
  std::vector<double> sizes;
  for (double factor : {0.1, 1.0 / 3, 1.0, 3.0, 10.0}) {
    const double mb = std::clamp(advised_bucket_mb * factor, kSmallestBucketMb, kLargestBucketMb);
    const double rounded = std::round(mb * 4) / 4;  // quarter-MB steps read better in a job file
    if (std::find(sizes.begin(), sizes.end(), rounded) == sizes.end()) sizes.push_back(rounded);
  }
  for (Transport transport : transports) {
    for (Strategy strategy : {Strategy::kBucketed, Strategy::kOverlap, Strategy::kFlat,
                              Strategy::kNaive, Strategy::kFsdp}) {
      const bool bucketed = strategy == Strategy::kBucketed;
      for (double mb : bucketed ? sizes : std::vector<double>{options.base.bucket_size_mb}) {
        for (bool zero : {false, true}) {
          if (zero && strategy == Strategy::kFsdp) continue;  // fsdp shards its own state
          DdpJobOptions o = options.base;
          o.strategy = strategy;
          o.bucket_size_mb = mb;
          o.transport = transport;
          o.shard_optimizer = zero;
          grid.push_back(o);
        }
      }
    }
  }
  return grid;
}

TuneOutcome tune(const TuneOptions& options, const RunTrial& run, const PlanFromProbe& plan_from,
                 const Report& report, const std::function<double()>& now) {
  Search search{options, run, report, now, now(), {}};
  // Step 1: the probe.
  Candidate probe;
  probe.options = options.base;
  probe.options.strategy = Strategy::kBucketed;
  probe.options.bucket_size_mb = kJobDefaults.bucket_size_mb;  // c10d's default too
  probe.options.shard_optimizer = false;
  probe.label = label_of(probe.options, options.world_size);
  if (!search.trial(probe, 1, options.trial_steps) || probe.trials.empty()) {
    search.outcome.candidates.push_back(probe);
    search.outcome.elapsed_s = now() - search.start;
    return search.outcome;
  }
  // Step 2: the grid around the replay's bucket size, on the transports this host offers.
  const ProbePlan plan = plan_from(probe.trials.back());
  if (options.world_size > 1 && !plan.transports.empty()) {
    probe.options.transport = plan.transports.front();  // as it ran: the job file says which
    probe.label = label_of(probe.options, options.world_size);
  }
  std::vector<Candidate> candidates{probe};
  for (const auto& o : candidate_grid(options, plan.advised_bucket_mb, plan.transports)) {
    if (options.world_size > 1 && same_configuration(o, probe.options)) continue;
    if (options.world_size <= 1) break;
    Candidate c;
    c.options = o;
    c.label = label_of(o, options.world_size);
    candidates.push_back(c);
  }
  // Step 3, then 4.
  if (options.world_size > 1) predict_and_prune(candidates, plan, options.prune_margin);
  search.rounds(candidates);
  rank(candidates);
  search.outcome.candidates = candidates;
  search.outcome.elapsed_s = now() - search.start;
  return search.outcome;
}

}  // namespace ddpd::client
