// ddpctl: submit, list, watch, show, cancel, workers and local.
// Exit codes: 0 success; 1 a failed RPC or job; 2 bad input (flags or INVALID_ARGUMENT).
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <thread>

#include "control_client.h"
#include "ddpd/comm_table.h"
#include "ddpd/ddp_flags.h"
#include "ddpd/restart_policy.h"
#include "ddpd/spec_convert.h"
#include "ddpd/unix_time.h"
#include "job_file.h"
#include "local_cluster.h"
#include "plan_command.h"
#include "plot.h"
#include "render.h"
#include "trace.h"

namespace {

using namespace ddpd;

// Without --batch, the default global batch (8) is rounded up to a multiple of the world size
// times --grad-accum, so `--workers 3` runs as it reads instead of failing on 8 % 3; an explicit
// --batch is kept as given.
void fit_default_batch(DdpJobOptions& options, const CLI::App& flags, int world_size) {
  const int64_t multiple =
      static_cast<int64_t>(world_size) * std::max<int64_t>(1, options.grad_accum);
  if (flags.count("--batch") > 0 || world_size < 1 || options.batch_size % multiple == 0) return;
  const int64_t fitted = (options.batch_size + multiple - 1) / multiple * multiple;
  std::fprintf(stderr,
               "note: --batch %lld (the default %lld rounded up to a multiple of world size %d x "
               "--grad-accum %lld)\n",
               static_cast<long long>(fitted), static_cast<long long>(options.batch_size),
               world_size, static_cast<long long>(options.grad_accum));
  options.batch_size = fitted;
}

v1::JobSpec ddp_spec(const DdpJobOptions& options, int world_size) {
  v1::JobSpec spec;
  spec.set_world_size(world_size);
  *spec.mutable_ddp() = to_proto(options);
  return spec;
}

v1::JobSpec comm_spec(const CommJob& job, int world_size) {
  v1::JobSpec spec;
  spec.set_world_size(world_size);
  *spec.mutable_comm() = to_proto(job);
  return spec;
}

// Comm-job flags beside the benchmark's own: backend and timeout.
// Prints live lines until the job ends; returns its final state.
v1::JobState follow(client::ControlClient& control, const std::string& job_id) {
  return control.watch(job_id, [](const v1::JobEvent& event) {
    std::cout << client::event_line(event) << std::endl;
  });
}

// `show --trace` and `local --trace`: the Chrome trace file and the overlap table.
void write_trace(const v1::GetJobReply& reply, const std::string& path, std::ostream& report) {
  const auto trace = client::chrome_trace(reply);
  std::ofstream out(path);
  if (!(out << trace.dump() << "\n"))
    throw std::runtime_error("--trace: cannot write '" + path + "'");
  report << "wrote " << path << " (" << trace["traceEvents"].size() << " events)\n"
         << client::overlap_table(client::overlap_by_rank(reply));
}

// Starts a local cluster of `workers`, runs `specs` one after another, prints the result (one
// sweep table for several comm jobs), shuts down. Exit 1 unless every job SUCCEEDED.
int run_local(const client::LocalClusterOptions& cluster_options, bool json,
              const std::vector<v1::JobSpec>& specs, const std::string& plot_path,
              const std::string& trace_path) {
  const int workers = cluster_options.workers;
  for (const auto& spec : specs) validate_spec(spec);  // refuse bad flags before starting
  for (const auto& spec : specs) {
    if (spec.world_size() > workers) {
      throw OptionError("--world-sizes", "world size " + std::to_string(spec.world_size()) +
                                             " exceeds --workers " + std::to_string(workers));
    }
  }
  client::LocalCluster cluster(cluster_options);
  client::ConnectionOptions connection;
  connection.coordinator = cluster.address();
  connection.token = cluster.token();
  client::ControlClient control(connection);
  // Wait for every worker to register.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    int idle = 0;
    try {
      const auto registered = control.workers();
      for (const auto& w : registered.workers()) idle += w.state() == v1::IDLE;
    } catch (const client::RpcError&) {
      // the coordinator is still starting
    }
    if (idle == workers) break;
    if (std::chrono::steady_clock::now() > deadline) {
      cluster.keep_directory();
      throw std::runtime_error("only " + std::to_string(idle) + " of " + std::to_string(workers) +
                               " workers registered within 60 s; logs in " + cluster.directory());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  bool all_succeeded = true;
  std::vector<nlohmann::json> outputs, comm_results;
  for (const auto& spec : specs) {
    const auto started = std::chrono::steady_clock::now();
    const v1::Job job_record = control.submit(spec);
    const v1::JobState state = json || specs.size() > 1
                                   ? control.watch(job_record.job_id(), [](const v1::JobEvent&) {})
                                   : follow(control, job_record.job_id());
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const auto reply = control.get(job_record.job_id(), /*with_steps=*/true);
    auto out = client::job_json(reply);
    out["end_to_end_seconds"] = seconds;
    outputs.push_back(out);
    if (state == v1::SUCCEEDED && spec.has_comm()) comm_results.push_back(out);
    if (!json && specs.size() == 1) {
      std::cout << client::job_summary(reply);
      std::printf("end to end %.2f s (submit to result, %d workers on loopback)\n", seconds,
                  workers);
    } else if (!json && state != v1::SUCCEEDED) {
      std::cout << client::job_summary(reply);
    }
    if (state != v1::SUCCEEDED) {
      all_succeeded = false;
      break;
    }
    if (!trace_path.empty() && spec.has_ddp()) {
      write_trace(reply, trace_path, json ? std::cerr : std::cout);
    }
  }
  if (json) {
    std::cout << (outputs.size() == 1 ? outputs.front() : nlohmann::json(outputs)).dump()
              << std::endl;
  } else if (specs.size() > 1) {
    std::cout << comm_sweep_table(comm_results);
  }
  if (all_succeeded && !plot_path.empty()) {
    if (specs.front().has_comm()) {
      client::plot_comm(comm_results, plot_path);
    } else {
      client::plot_ddp(outputs.front(), plot_path);
    }
    if (!json) std::cout << "wrote " << plot_path << std::endl;
  }
  if (!all_succeeded) {
    cluster.keep_directory();
    std::fprintf(stderr, "a job did not succeed; daemon logs in %s\n", cluster.directory().c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ddpctl: submit and watch ddpd jobs"};
  app.require_subcommand(1);
  app.fallthrough();
  client::ConnectionOptions connection;
  app.add_option("--coordinator", connection.coordinator, "Coordinator host:port")
      ->capture_default_str();
  app.add_option("--token", connection.token, "Shared token (default: $DDPD_TOKEN)");
  app.add_option("--tls-ca", connection.tls_ca, "PEM CA certificate: connect with TLS");

  auto* submit = app.add_subcommand("submit", "Submit a job");
  submit->require_subcommand(1);
  auto* submit_ddp = submit->add_subcommand("ddp", "DDP training of the Transformer LM");
  DdpJobOptions job;
  int world_size = 1;
  bool submit_watch = false;
  add_ddp_flags(*submit_ddp, job);
  submit_ddp->add_option("--world-size", world_size, "Ranks (one worker each)")
      ->capture_default_str();
  submit_ddp->add_flag("--watch", submit_watch, "Follow the job until it ends");
  auto* submit_comm = submit->add_subcommand("comm", "Collective benchmark");
  CommJob comm_job;
  add_comm_job_flags(*submit_comm, comm_job);
  submit_comm->add_option("--world-size", world_size, "Ranks (one worker each)")
      ->capture_default_str();
  submit_comm->add_flag("--watch", submit_watch, "Follow the job until it ends");
  // -f FILE on every job command: the file's keys, under the flags given on the command line.
  std::string job_file;
  const char* job_file_help = "Job file (YAML or JSON; keys are the flags without dashes)";

  app.add_subcommand("list", "List jobs");
  std::string job_id;
  auto* watch = app.add_subcommand("watch", "Follow a job's progress until it ends");
  watch->add_option("job", job_id, "Job id")->required();
  auto* show = app.add_subcommand("show", "Show a job's summary and results");
  show->add_option("job", job_id, "Job id")->required();
  bool as_json = false, as_csv = false;
  show->add_flag("--json", as_json, "The run --json envelope plus job_id and history");
  show->add_flag("--csv", as_csv, "Per-rank step rows");
  bool as_spec = false;
  show->add_flag("--spec", as_spec,
                 "The job's effective spec as a job file (YAML) that resubmits it: submit … -f");
  std::string plot_path;
  show->add_option("--plot", plot_path,
                   "Draw a chart (.png or .svg): busbw by size for comm jobs, step time and comm "
                   "fraction for DDP jobs (needs gnuplot)");
  std::string trace_path;
  show->add_option("--trace", trace_path,
                   "Write a per-rank timeline (Chrome trace JSON: open in ui.perfetto.dev or "
                   "chrome://tracing) and print how much communication overlapped backward");
  auto* resume = app.add_subcommand(
      "resume", "Submit a job that continues JOB's latest checkpoint (docs/checkpoints.md)");
  resume->add_option("job", job_id, "Job id")->required();
  int resume_world = 0;
  std::string resume_strategy;
  int64_t resume_steps = 0;
  resume->add_option("--world-size", resume_world, "World size (default: JOB's)");
  resume->add_option("--strategy", resume_strategy, "Strategy (default: JOB's)");
  resume->add_option("--steps", resume_steps, "Total steps (default: JOB's)");
  resume->add_flag("--watch", submit_watch, "Follow the job until it ends");
  auto* diagnose = app.add_subcommand(
      "diagnose", "One row per rank: state, phase, step, collective progress, compute score");
  diagnose->add_option("job", job_id, "Job id")->required();
  diagnose->add_flag("--json", as_json, "As JSON");
  auto* cancel = app.add_subcommand("cancel", "Cancel a pending or running job");
  cancel->add_option("job", job_id, "Job id")->required();
  app.add_subcommand("workers", "List registered workers");

  auto* plan =
      app.add_subcommand("plan", "Memory, mesh and bucket-size accounting (docs/planning.md)");
  client::PlanFlags plan_flags;
  client::add_plan_flags(*plan, plan_flags);
  auto* plan_memory = plan->add_subcommand(
      "memory", "Per-rank parameters, gradients and optimizer state of each strategy");
  client::MemoryFlags memory_flags;
  client::add_memory_flags(*plan_memory, memory_flags);
  auto* plan_bucket = plan->add_subcommand("bucket", "Recommend a DDP bucket size");
  client::BucketFlags bucket_flags;
  client::add_bucket_flags(*plan_bucket, bucket_flags);

  auto* local = app.add_subcommand("local", "Run a coordinator and N workers here, and one job");
  local->require_subcommand(1);
  client::LocalClusterOptions local_cluster;
  bool local_json = false;
  local->add_option("--workers", local_cluster.workers, "Workers (the job's world size)")
      ->capture_default_str();
  local->add_flag("--json", local_json, "Print the result as JSON");
  local->add_option("--log-level", local_cluster.log_level, "Daemons' log level")
      ->capture_default_str();
  local->add_option("--log-format", local_cluster.log_format, "Daemons' log format: text, json")
      ->capture_default_str();
  local
      ->add_option("--metrics-port", local_cluster.metrics_port,
                   "Serve /metrics: the coordinator on this port, worker i on port+1+i (0: off)")
      ->capture_default_str();
  std::string local_plot, local_trace;
  local->add_option("--plot", local_plot, "Also draw the result (.png or .svg; needs gnuplot)");
  local->add_option("--trace", local_trace,
                    "Also write the DDP job's per-rank timeline (see show)");
  auto* local_ddp = local->add_subcommand("ddp", "DDP training of the Transformer LM");
  DdpJobOptions local_job;
  add_ddp_flags(*local_ddp, local_job);
  auto* local_comm = local->add_subcommand("comm", "Collective benchmark (one job per world size)");
  CommJob local_comm_job;
  std::vector<int> world_sizes;
  add_comm_job_flags(*local_comm, local_comm_job);
  for (CLI::App* command : {submit_ddp, submit_comm, local_ddp, local_comm}) {
    command->add_option("-f,--file", job_file, job_file_help);
  }
  local_comm
      ->add_option("--world-sizes", world_sizes,
                   "Sweep: one job per world size, e.g. 2,4,6 (default: --workers)")
      ->delimiter(',');

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const OptionError& e) {  // from --sizes
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  if (connection.token.empty()) {
    if (const char* env = std::getenv("DDPD_TOKEN")) connection.token = env;
  }
  if (!job_file.empty()) {
    try {
      for (CLI::App* command : {submit_ddp, submit_comm, local_ddp, local_comm}) {
        if (command->parsed()) client::apply_job_file(job_file, *command);
      }
    } catch (const OptionError& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 2;
    }
  }

  try {
    if (plan_memory->parsed()) {
      client::print_memory_plan(memory_flags);
      return 0;
    }
    if (plan_bucket->parsed()) {
      std::string comm_result;
      if (!bucket_flags.from_job.empty()) {
        const auto reply = client::ControlClient(connection).get(bucket_flags.from_job, false);
        if (!reply.job().spec().has_comm() || reply.job().state() != v1::SUCCEEDED) {
          throw OptionError("--from-job", bucket_flags.from_job + " is not a succeeded comm job");
        }
        comm_result = reply.job().result_json();
      }
      client::print_bucket_plan(bucket_flags, comm_result);
      return 0;
    }
    if (plan->parsed()) {
      client::print_plan(plan_flags);
      return 0;
    }
    if (local->parsed()) {
      if (local_cluster.workers < 1) throw OptionError("--workers", "must be >= 1");
      if (local_cluster.metrics_port < 0 ||
          local_cluster.metrics_port + local_cluster.workers > 65535) {
        throw OptionError("--metrics-port",
                          "must be 0 (off) or leave room for one port per worker");
      }
      std::vector<v1::JobSpec> specs;
      if (local_comm->parsed()) {
        if (world_sizes.empty()) world_sizes.push_back(local_cluster.workers);
        for (int w : world_sizes) {
          if (w < 1) throw OptionError("--world-sizes", "must be >= 1");
          specs.push_back(comm_spec(local_comm_job, w));
        }
      } else {
        fit_default_batch(local_job, *local_ddp, local_cluster.workers);
        specs.push_back(ddp_spec(local_job, local_cluster.workers));
      }
      return run_local(local_cluster, local_json, specs, local_plot, local_trace);
    }
    client::ControlClient control(connection);
    if (submit->parsed()) {
      if (submit_ddp->parsed()) fit_default_batch(job, *submit_ddp, world_size);
      const v1::JobSpec spec =
          submit_comm->parsed() ? comm_spec(comm_job, world_size) : ddp_spec(job, world_size);
      validate_spec(spec);  // the coordinator checks again; fail fast here
      const v1::Job submitted = control.submit(spec);
      std::cout << submitted.job_id() << std::endl;
      if (!submit_watch) return 0;
      return follow(control, submitted.job_id()) == v1::SUCCEEDED ? 0 : 1;
    }
    if (app.got_subcommand("list")) {
      std::cout << client::jobs_table(control.list());
    } else if (watch->parsed()) {
      return follow(control, job_id) == v1::SUCCEEDED ? 0 : 1;
    } else if (show->parsed()) {
      const auto reply =
          control.get(job_id, as_json || as_csv || !plot_path.empty() || !trace_path.empty());
      if (as_spec) {
        std::cout << client::job_file_yaml(reply.job().spec());
      } else if (!trace_path.empty()) {
        write_trace(reply, trace_path, std::cout);
      } else if (!plot_path.empty()) {
        const auto job_json = client::job_json(reply);
        if (reply.job().spec().has_comm()) {
          client::plot_comm({job_json}, plot_path);
        } else {
          client::plot_ddp(job_json, plot_path);
        }
        std::cout << "wrote " << plot_path << std::endl;
      } else if (as_json) {
        std::cout << client::job_json(reply).dump() << std::endl;
      } else if (as_csv) {
        std::cout << client::steps_csv(reply);
      } else {
        std::cout << client::job_summary(reply);
      }
    } else if (resume->parsed()) {
      const v1::Job old = control.get(job_id, false).job();
      if (!old.spec().has_ddp() || old.spec().ddp().checkpoint_dir().empty()) {
        throw OptionError("job",
                          job_id + " is not a DDP job with --checkpoint-dir: nothing to resume");
      }
      // Its `latest`, read by the ranks at start.
      v1::JobSpec spec = resumed_spec(old.spec(), old.spec().ddp().checkpoint_dir());
      auto* ddp = spec.mutable_ddp();
      if (resume_world > 0) spec.set_world_size(resume_world);
      if (!resume_strategy.empty()) ddp->set_strategy(resume_strategy);
      if (resume_steps > 0) ddp->set_steps(resume_steps);
      validate_spec(spec);
      const v1::Job submitted = control.submit(spec, job_id);
      std::cout << submitted.job_id() << std::endl;
      if (!submit_watch) return 0;
      return follow(control, submitted.job_id()) == v1::SUCCEEDED ? 0 : 1;
    } else if (diagnose->parsed()) {
      const auto reply = control.get(job_id, false);
      const double now = unix_now();
      if (as_json) {
        std::cout << client::diagnosis_json(reply.job(), now).dump() << std::endl;
      } else {
        std::cout << client::diagnosis_table(reply.job(), now);
      }
    } else if (cancel->parsed()) {
      const v1::Job cancelled = control.cancel(job_id);
      std::cout << cancelled.job_id() << " " << v1::JobState_Name(cancelled.state()) << std::endl;
    } else if (app.got_subcommand("workers")) {
      std::cout << client::workers_table(control.workers());
    }
    return 0;
  } catch (const OptionError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const client::RpcError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
