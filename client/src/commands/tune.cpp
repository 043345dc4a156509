// ddpctl tune [model and data flags] --world-size N [--budget 10m] [-o best.yaml] [--json], and
// ddpctl local tune (its own loopback cluster of N workers): the search of tuner.h, each trial a
// job through the coordinator. Ctrl-C cancels the running trial and stops the search; a trial
// cancelled from elsewhere (`ddpctl cancel`) stops it too. Either way the table so far prints.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "commands.h"
#include "ddpd/api/spec_convert.h"
#include "ddpd/common/ddp_flags.h"
#include "ddpd/common/result_json.h"
#include "job_file.h"
#include "job_specs.h"
#include "local_cluster.h"
#include "measured_job.h"
#include "tuner.h"
#include "whatif_report.h"

namespace ddpd::client {
namespace {

struct TuneFlags {
  DdpJobOptions base;
  int world_size = 2;
  std::string budget = "10m";
  int64_t trial_steps = 6;
  double prune_margin = 0.25;
  bool single_transport = false;
  std::string output;
  bool json = false;
  std::string job_file;
};

std::atomic<bool> interrupted{false};
extern "C" void on_interrupt(int) { interrupted.store(true); }

// "90s", "10m", "1h", or seconds.
double budget_seconds(const std::string& text) {
  try {
    size_t used = 0;
    const double value = std::stod(text, &used);
    const std::string unit = text.substr(used);
    const std::map<std::string, double> units{{"", 1}, {"s", 1}, {"m", 60}, {"h", 3600}};
    if (value > 0 && units.count(unit)) return value * units.at(unit);
  } catch (const std::exception&) {
  }
  throw OptionError("--budget", "'" + text + "' is not a duration such as 90s, 10m or 1h");
}

// Runs trials as jobs and cancels the running one on Ctrl-C (a watcher thread, since the watch
// blocks). Thread contract: run() on one thread; the watcher only reads `current_` under the lock.
class CoordinatorTrials {
 public:
  CoordinatorTrials(const ConnectionOptions& connection, int world_size)
      : connection_(connection), control_(connection), world_size_(world_size) {
    watcher_ = std::thread([this] { watch_for_interrupt(); });
  }
  ~CoordinatorTrials() {
    done_.store(true);
    watcher_.join();
  }

  std::optional<TrialResult> run(const DdpJobOptions& options, int64_t steps) {
    DdpJobOptions trial = options;
    trial.steps = steps;
    trial.warmup_steps = std::min<int64_t>(2, steps - 1);
    trial.checkpoint_every = 0;
    const auto started = std::chrono::steady_clock::now();
    const v1::Job job = control_.submit(ddp_spec(trial, world_size_));
    set_current(job.job_id());
    const v1::JobState state = control_.watch(job.job_id(), [](const v1::JobEvent&) {});
    set_current("");
    if (state == v1::CANCELLED) return std::nullopt;
    const auto reply = control_.get(job.job_id(), false);
    if (state != v1::SUCCEEDED) {
      throw std::runtime_error(job.job_id() + " " + v1::JobState_Name(state) + ": " +
                               reply.job().error());
    }
    measured_[job.job_id()] = measured_job(reply, "trial");
    return result_of(measured_[job.job_id()], started);
  }

  // The probe's plan: the replay of its measured job (tuner.h, ProbePlan).
  ProbePlan plan_from(const TrialResult& probe, bool both_transports) {
    const MeasuredJob job = measured_.at(probe.job_id);
    ProbePlan plan;
    try {
      plan.advised_bucket_mb = bucket_sweep(job).best_mb;
    } catch (const std::exception&) {
      // No replay (one rank, no profile): the default stays the centre.
    }
    const Transport ran =
        job.result.transport == GroupTransport::kGloo ? Transport::kGloo : Transport::kShm;
    plan.transports = {ran};
    if (both_transports && ran == Transport::kShm) plan.transports.push_back(Transport::kGloo);
    plan.predict = [this, job, ran](const DdpJobOptions& o) -> std::optional<double> {
      WhatIfChange change;
      change.strategy = o.strategy;
      change.bucket_size_mb = o.bucket_size_mb;
      change.transport = o.transport;
      change.shard_optimizer = o.shard_optimizer;
      try {
        return predict(job, change, o.transport == ran ? std::nullopt : link(o.transport)).step_s;
      } catch (const std::exception&) {
        return std::nullopt;  // not modeled: it runs
      }
    };
    return plan;
  }

  // The link of `transport` from a short comm job at the tune's world size, measured once.
  std::optional<LinkModel> link(Transport transport) {
    if (links_.count(transport)) return links_[transport];
    CommJob comm;
    comm.transport = transport;
    comm.bench.sizes_bytes = {int64_t{1} << 20, int64_t{4} << 20, int64_t{16} << 20};
    comm.bench.warmup = 2;
    comm.bench.iters = 5;
    const v1::Job job = control_.submit(comm_spec(comm, world_size_));
    set_current(job.job_id());
    const v1::JobState state = control_.watch(job.job_id(), [](const v1::JobEvent&) {});
    set_current("");
    links_[transport] = std::nullopt;
    if (state == v1::SUCCEEDED) {
      links_[transport] = comm_job_link(control_.get(job.job_id(), false), "");
    }
    return links_[transport];
  }

 private:
  static TrialResult result_of(const MeasuredJob& job, std::chrono::steady_clock::time_point t0) {
    const StepFigures f = measured_figures(job);
    TrialResult r;
    r.job_id = job.job_id;
    r.steps = job.options.steps;
    r.median_step_s = f.step_s;
    r.std_step_s = job.result.summary.std_step_seconds;
    r.exposed_comm_s = f.exposed_comm_s;
    r.peak_bytes = f.peak_bytes;
    r.tokens_per_s = f.tokens_per_s;
    r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  }
  void set_current(const std::string& id) {
    std::lock_guard<std::mutex> lock(mutex_);
    current_ = id;
  }
  void watch_for_interrupt() {
    ControlClient canceller(connection_);
    while (!done_.load()) {
      if (interrupted.load()) {
        std::string id;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          id = current_;
        }
        if (!id.empty()) {
          try {
            canceller.cancel(id);
          } catch (const std::exception&) {
          }
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  ConnectionOptions connection_;
  ControlClient control_;
  int world_size_;
  std::map<std::string, MeasuredJob> measured_;
  std::map<Transport, std::optional<LinkModel>> links_;
  std::mutex mutex_;
  std::string current_;
  std::atomic<bool> done_{false};
  std::thread watcher_;
};

std::string outcome_table(const TuneOutcome& outcome) {
  std::string out;
  char row[256];
  std::snprintf(row, sizeof row, "%-4s %-40s %6s %16s %10s %9s %9s %10s  %s\n", "rank",
                "configuration", "steps", "step ms", "exposed", "peak MB", "tokens/s", "predicted",
                "");
  out += row;
  int rank = 0;
  for (const auto& c : outcome.candidates) {
    const std::string predicted =
        c.predicted_s ? std::to_string(static_cast<int>(*c.predicted_s * 1e3 + 0.5)) + " ms" : "-";
    if (c.trials.empty()) {
      std::snprintf(row, sizeof row, "%-4s %-40s %6s %16s %10s %9s %9s %10s  %s\n", "-",
                    c.label.c_str(), "", "", "", "", "", predicted.c_str(),
                    c.skipped.empty() ? "not run (budget)" : ("skipped: " + c.skipped).c_str());
    } else {
      const TrialResult& t = c.trials.back();
      char step[32];
      std::snprintf(step, sizeof step, "%.1f ± %.1f", t.median_step_s * 1e3, t.std_step_s * 1e3);
      const std::string note = rank == 0 ? "winner" : "round " + std::to_string(c.last_round);
      std::snprintf(row, sizeof row, "%-4d %-40s %6lld %16s %10.1f %9.1f %9.0f %10s  %s\n", ++rank,
                    c.label.c_str(), static_cast<long long>(t.steps), step, t.exposed_comm_s * 1e3,
                    t.peak_bytes / 1e6, t.tokens_per_s, predicted.c_str(), note.c_str());
    }
    out += row;
  }
  // Trials of a few steps on a shared host differ by noise; say how many are within it.
  const Candidate& best = outcome.candidates.front();
  if (best.trials.empty()) return out;
  const TrialResult& w = best.trials.back();
  int close = 0;
  for (size_t i = 1; i < outcome.candidates.size(); ++i) {
    const auto& c = outcome.candidates[i];
    close += !c.trials.empty() && c.trials.back().median_step_s - w.median_step_s <= w.std_step_s;
  }
  if (close > 0) {
    std::snprintf(
        row, sizeof row,
        "%d more within the winner's spread (±%.1f ms): between them the difference is "
        "noise at these trial lengths (a longer --budget or --trial-steps separates them)\n",
        close, w.std_step_s * 1e3);
    out += row;
  }
  return out;
}

nlohmann::json outcome_json(const TuneOutcome& outcome) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& c : outcome.candidates) {
    nlohmann::json row{{"configuration", c.label},
                       {"strategy", enum_name(c.options.strategy)},
                       {"bucket_size_mb", c.options.bucket_size_mb},
                       {"transport", enum_name(c.options.transport)},
                       {"shard_optimizer", c.options.shard_optimizer},
                       {"last_round", c.last_round},
                       {"skipped", c.skipped}};
    if (c.predicted_s) row["predicted_step_seconds"] = *c.predicted_s;
    for (const auto& t : c.trials) {
      row["trials"].push_back({{"job_id", t.job_id},
                               {"steps", t.steps},
                               {"median_step_seconds", t.median_step_s},
                               {"std_step_seconds", t.std_step_s},
                               {"exposed_comm_seconds", t.exposed_comm_s},
                               {"peak_bytes", t.peak_bytes},
                               {"tokens_per_second", t.tokens_per_s}});
    }
    rows.push_back(row);
  }
  return {{"candidates", rows},
          {"cancelled", outcome.cancelled},
          {"budget_exhausted", outcome.budget_exhausted},
          {"elapsed_seconds", outcome.elapsed_s}};
}

int run_tune(const ConnectionOptions& connection, const TuneFlags& flags) {
  TuneOptions options;
  options.base = flags.base;
  options.world_size = flags.world_size;
  options.budget_s = budget_seconds(flags.budget);
  options.trial_steps = flags.trial_steps;
  options.prune_margin = flags.prune_margin;
  options.try_both_transports = !flags.single_transport;
  if (flags.trial_steps < 3) throw OptionError("--trial-steps", "must be >= 3 (2 are warm-up)");
  validate(options.base, options.world_size);
  interrupted.store(false);
  auto previous = std::signal(SIGINT, on_interrupt);
  CoordinatorTrials trials(connection, flags.world_size);
  const auto t0 = std::chrono::steady_clock::now();
  std::ostream& progress = flags.json ? std::cerr : std::cout;
  const TuneOutcome outcome = tune(
      options, [&](const DdpJobOptions& o, int64_t steps) { return trials.run(o, steps); },
      [&](const TrialResult& probe) {
        return trials.plan_from(probe, options.try_both_transports);
      },
      [&](const std::string& line) { progress << line << std::endl; },
      [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); });
  std::signal(SIGINT, previous);
  const Candidate& best = outcome.candidates.front();
  const bool found = !best.trials.empty() && !outcome.cancelled;
  if (found && !flags.output.empty()) {
    std::ofstream(flags.output) << job_file_yaml(ddp_spec(best.options, flags.world_size));
  }
  if (flags.json) {
    auto out = outcome_json(outcome);
    if (found) out["winner"] = best.label;
    std::cout << out.dump() << std::endl;
  } else {
    std::cout << outcome_table(outcome);
    if (outcome.cancelled) std::cout << "cancelled: the table holds the trials that finished\n";
    if (outcome.budget_exhausted) std::cout << "the budget ran out before the last round\n";
    if (found && !flags.output.empty()) {
      std::cout << "wrote " << flags.output << " (" << best.label << "): ddpctl submit ddp -f "
                << flags.output << "\n";
    }
  }
  return found ? 0 : 1;
}

void add_tune_flags(CLI::App& command, TuneFlags& flags) {
  add_ddp_flags(command, flags.base);
  add_job_file_flag(command, flags.job_file);
  command.add_option("--world-size", flags.world_size, "Ranks of every trial")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  command.add_option("--budget", flags.budget, "Wall clock for all trials: 90s, 10m, 1h")
      ->capture_default_str();
  command
      .add_option("--trial-steps", flags.trial_steps,
                  "Steps of a first-round trial (2 warm-up); each later round doubles them")
      ->capture_default_str();
  command
      .add_option("--prune-margin", flags.prune_margin,
                  "Skip candidates whatif predicts this fraction slower than the best")
      ->capture_default_str();
  command.add_flag("--single-transport", flags.single_transport,
                   "Try only the transport the first trial ran on (else shm and gloo)");
  command.add_option("-o,--output", flags.output, "Write the winner as a job file (submit -f)");
  command.add_flag("--json", flags.json, "The ranked candidates and their trials as JSON");
}

}  // namespace

void add_tune_command(CLI::App& app, Commands& commands) {
  auto flags = std::make_shared<TuneFlags>();
  auto* command = app.add_subcommand(
      "tune",
      "Run short trials over strategies, bucket sizes, transports and ZeRO-1 through "
      "the coordinator and keep the fastest (docs/whatif.md)");
  add_tune_flags(*command, *flags);
  commands.on(command, [&commands, flags, command] {
    apply_job_file_if_given(flags->job_file, *command);
    make_paths_absolute(flags->base);  // the trials run on the workers, elsewhere
    return run_tune(commands.connection(), *flags);
  });
  auto* local = app.get_subcommand("local");
  auto* local_tune = local->add_subcommand(
      "tune", "The same on a coordinator and --world-size workers started here");
  auto local_flags = std::make_shared<TuneFlags>();
  add_tune_flags(*local_tune, *local_flags);
  commands.on(local_tune, [local_flags, local_tune] {
    apply_job_file_if_given(local_flags->job_file, *local_tune);
    make_paths_absolute(local_flags->base);
    LocalClusterOptions options;
    options.workers = local_flags->world_size;
    LocalCluster cluster(options);
    ConnectionOptions connection;
    connection.coordinator = cluster.address();
    connection.token = cluster.token();
    connection.wait_seconds = 0;  // its own coordinator: wait_for_workers waits for it to start
    ControlClient control(connection);
    wait_for_workers(cluster, control, local_flags->world_size);
    return run_tune(connection, *local_flags);
  });
}

}  // namespace ddpd::client
