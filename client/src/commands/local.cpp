// ddpctl local ddp | comm: a coordinator and N workers on loopback (LocalCluster), one job (or one
// comm job per --world-sizes entry) run through them, the result printed, everything stopped.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <thread>

#include "commands.h"
#include "ddpd/api/spec_convert.h"
#include "ddpd/common/comm_table.h"
#include "ddpd/common/ddp_flags.h"
#include "ddpd/common/result_json.h"
#include "job_file.h"
#include "job_specs.h"
#include "local_cluster.h"
#include "plot.h"
#include "render.h"

namespace ddpd::client {
namespace {

struct LocalFlags {
  LocalClusterOptions cluster;
  bool json = false;
  std::string plot_path;
  std::string trace_path;
  DdpJobOptions ddp;
  CommJob comm;
  std::vector<int> world_sizes;  // comm: one job each (default: --workers)
  int ddp_world_size = 0;        // ddp: --world-size, or a job file's (0: --workers)
  std::string job_file;
};

constexpr auto kRegistrationTimeout = std::chrono::seconds(60);

}  // namespace

void wait_for_workers(LocalCluster& cluster, ControlClient& control, int workers) {
  const auto deadline = std::chrono::steady_clock::now() + kRegistrationTimeout;
  for (;;) {
    int idle = 0;
    try {
      const auto registered = control.workers();
      for (const auto& w : registered.workers()) idle += w.state() == v1::IDLE;
    } catch (const RpcError&) {
      // the coordinator is still starting
    }
    if (idle == workers) return;
    if (std::chrono::steady_clock::now() > deadline) {
      cluster.keep_directory();
      throw std::runtime_error("only " + std::to_string(idle) + " of " + std::to_string(workers) +
                               " workers registered within 60 s; logs in " + cluster.directory());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

namespace {

struct LocalRun {
  std::vector<nlohmann::json> outputs;        // every job's job_json, in order
  std::vector<CommBenchResult> comm_results;  // the comm jobs that succeeded
  bool all_succeeded = true;
};

// Runs the specs one after another, printing each as it ends; stops at the first failure.
LocalRun run_jobs(ControlClient& control, const LocalFlags& flags,
                  const std::vector<v1::JobSpec>& specs) {
  LocalRun run;
  const bool quiet = flags.json || specs.size() > 1;  // no live lines
  for (const auto& spec : specs) {
    const auto started = std::chrono::steady_clock::now();
    const v1::Job submitted = control.submit(spec);
    const v1::JobState state = quiet ? control.watch(submitted.job_id(), [](const v1::JobEvent&) {})
                                     : follow(control, submitted.job_id());
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const auto reply = control.get(submitted.job_id(), /*with_steps=*/true);
    auto out = job_json(reply);
    out["end_to_end_seconds"] = seconds;
    run.outputs.push_back(out);
    if (state == v1::SUCCEEDED && spec.has_comm()) {
      run.comm_results.push_back(comm_result_from_json(out));
    }
    if (!flags.json && specs.size() == 1) {
      std::cout << job_summary(reply);
      std::printf("end to end %.2f s (submit to result, %d workers on loopback)\n", seconds,
                  flags.cluster.workers);
    } else if (!flags.json && state != v1::SUCCEEDED) {
      std::cout << job_summary(reply);
    }
    if (state != v1::SUCCEEDED) {
      run.all_succeeded = false;
      return run;
    }
    if (!flags.trace_path.empty() && spec.has_ddp()) {
      write_trace(reply, flags.trace_path, flags.json ? std::cerr : std::cout);
    }
  }
  return run;
}

void print_results(const LocalFlags& flags, const std::vector<v1::JobSpec>& specs,
                   const LocalRun& run) {
  if (flags.json) {
    std::cout
        << (run.outputs.size() == 1 ? run.outputs.front() : nlohmann::json(run.outputs)).dump()
        << std::endl;
  } else if (specs.size() > 1) {
    std::cout << comm_sweep_table(run.comm_results);
  }
  if (!run.all_succeeded || flags.plot_path.empty()) return;
  if (specs.front().has_comm()) {
    plot_comm(run.comm_results, flags.plot_path);
  } else {
    plot_ddp(training_result_from_json(run.outputs.front()),
             run.outputs.front()["job_id"].get<std::string>(), flags.plot_path);
  }
  if (!flags.json) std::cout << "wrote " << flags.plot_path << std::endl;
}

// Exit 1 unless every job SUCCEEDED; the daemons' logs are kept then.
int run_local(const LocalFlags& flags, const std::vector<v1::JobSpec>& specs) {
  const int workers = flags.cluster.workers;
  for (const auto& spec : specs) validate_spec(spec);  // refuse bad flags before starting
  for (const auto& spec : specs) {
    if (spec.world_size() > workers) {
      throw OptionError("--world-sizes", "world size " + std::to_string(spec.world_size()) +
                                             " exceeds --workers " + std::to_string(workers));
    }
  }
  LocalCluster cluster(flags.cluster);
  ConnectionOptions connection;
  connection.coordinator = cluster.address();
  connection.token = cluster.token();
  connection.wait_seconds = 0;  // its own coordinator: wait_for_workers waits for it to start
  ControlClient control(connection);
  wait_for_workers(cluster, control, workers);
  const LocalRun run = run_jobs(control, flags, specs);
  print_results(flags, specs, run);
  if (!run.all_succeeded) {
    cluster.keep_directory();
    std::fprintf(stderr, "a job did not succeed; daemon logs in %s\n", cluster.directory().c_str());
    return 1;
  }
  return 0;
}

void check_cluster_flags(const LocalClusterOptions& cluster) {
  if (cluster.workers < 1) throw OptionError("--workers", "must be >= 1");
  if (cluster.metrics_port < 0 || cluster.metrics_port + cluster.workers > 65535) {
    throw OptionError("--metrics-port", "must be 0 (off) or leave room for one port per worker");
  }
}

void add_cluster_flags(CLI::App& local, LocalFlags& flags) {
  local.add_option("--workers", flags.cluster.workers, "Workers (the job's world size)")
      ->capture_default_str();
  local.add_flag("--json", flags.json, "Print the result as JSON");
  local.add_option("--log-level", flags.cluster.log_level, "Daemons' log level")
      ->capture_default_str();
  local.add_option("--log-format", flags.cluster.log_format, "Daemons' log format: text, json")
      ->capture_default_str();
  local
      .add_option("--metrics-port", flags.cluster.metrics_port,
                  "Serve /metrics: the coordinator on this port, worker i on port+1+i (0: off)")
      ->capture_default_str();
  local.add_option("--plot", flags.plot_path, "Also draw the result (.png or .svg; needs gnuplot)");
  local.add_option("--trace", flags.trace_path,
                   "Also write the DDP job's per-rank timeline (see show)");
}

}  // namespace

void add_local_command(CLI::App& app, Commands& commands) {
  auto flags = std::make_shared<LocalFlags>();
  auto* local = app.add_subcommand("local", "Run a coordinator and N workers here, and one job");
  local->require_subcommand(1);
  add_cluster_flags(*local, *flags);
  auto* ddp = local->add_subcommand("ddp", "DDP training of the Transformer LM");
  add_ddp_flags(*ddp, flags->ddp);
  auto* comm = local->add_subcommand("comm", "Collective benchmark (one job per world size)");
  add_comm_job_flags(*comm, flags->comm);
  for (CLI::App* command : {ddp, comm}) add_job_file_flag(*command, flags->job_file);
  ddp->add_option("--world-size", flags->ddp_world_size,
                  "Ranks (default --workers); a job file's world-size (show --spec, tune -o) sets "
                  "it, and more workers start if it needs them");
  comm->add_option("--world-sizes", flags->world_sizes,
                   "Sweep: one job per world size, e.g. 2,4,6 (default: --workers)")
      ->delimiter(',');
  commands.on(ddp, [flags, ddp] {
    apply_job_file_if_given(flags->job_file, *ddp);
    make_paths_absolute(flags->ddp);  // the daemons run in a directory of their own
    check_cluster_flags(flags->cluster);
    if (flags->ddp_world_size < 0) throw OptionError("--world-size", "must be >= 1");
    const int world = flags->ddp_world_size > 0 ? flags->ddp_world_size : flags->cluster.workers;
    flags->cluster.workers = std::max(flags->cluster.workers, world);
    fit_default_batch(flags->ddp, *ddp, world);
    fit_local_straggler_threshold(flags->ddp, *ddp, world, std::thread::hardware_concurrency());
    return run_local(*flags, {ddp_spec(flags->ddp, world)});
  });
  commands.on(comm, [flags, comm] {
    apply_job_file_if_given(flags->job_file, *comm);
    check_cluster_flags(flags->cluster);
    std::vector<v1::JobSpec> specs;
    if (flags->world_sizes.empty()) flags->world_sizes.push_back(flags->cluster.workers);
    for (int w : flags->world_sizes) {
      if (w < 1) throw OptionError("--world-sizes", "must be >= 1");
      specs.push_back(comm_spec(flags->comm, w));
    }
    return run_local(*flags, specs);
  });
}

}  // namespace ddpd::client
