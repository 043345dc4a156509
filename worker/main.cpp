// ddpd-worker: `run ddp …` trains one job without a coordinator, from torchrun-style
// environment variables (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK); `serve`
// runs a coordinator's jobs, each rank in a `rank` child process.
// Exit codes: 0 succeeded, 1 the job failed, 2 bad command line or environment.
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <malloc.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "ddpd/common/comm_table.h"
#include "ddpd/common/ddp_flags.h"
#include "ddpd/common/memory_estimate.h"
#include "ddpd/common/result_json.h"
#include "ddpd/core/comm_bench.h"
#include "ddpd/core/communicator.h"
#include "ddpd/core/hf_export.h"
#include "ddpd/core/local_run.h"
#include "ddpd/core/rendezvous.h"
#include "ddpd/core/standalone_run.h"
#include "ddpd/core/trainer.h"
#include "ddpd/service/logging.h"
#include "rank_main.h"
#include "worker_daemon.h"
#include "worker_metrics.h"

namespace {

volatile std::sig_atomic_t stop_requested = 0;
void on_signal(int) { stop_requested = 1; }

int serve(ddpd::WorkerDaemonOptions options) {
  if (options.token.empty()) {
    if (const char* env = std::getenv("DDPD_TOKEN")) options.token = env;
  }
  std::unique_ptr<ddpd::WorkerDaemon> daemon;
  try {
    daemon = std::make_unique<ddpd::WorkerDaemon>(options);
  } catch (const std::exception& e) {
    spdlog::error("worker cannot start: {}", e.what());
    return 1;
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::atomic<bool> done{false};
  std::thread watcher([&] {
    while (!done && !stop_requested) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    daemon->stop();
  });
  int rc = 1;
  try {
    rc = daemon->run();
  } catch (const std::exception& e) {
    spdlog::error("worker failed: {}", e.what());
  }
  done = true;
  watcher.join();
  return rc;
}

// Training frees and reallocates the same large tensors every step. glibc's defaults return
// big blocks to the kernel (munmap / heap trim) on free, so each step page-faults its
// activations and optimizer temporaries back in: measured ~2x slower AdamW steps. Keep freed
// memory in the heap instead (process-wide policy, so it is set here, at the entry point).
void keep_freed_memory_for_reuse() {
  mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);  // glibc's maximum on 64-bit
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 256 * 1024 * 1024);
}

void print_summary(const ddpd::DdpJobOptions& o, int world, const ddpd::TrainingResult& r) {
  // The synchronisation that ran, which at world size 1 is none whatever --strategy said.
  std::printf("SUCCEEDED  model=%s sync=%s%s world=%d steps=%ld\n", o.model.c_str(),
              r.synchronization.c_str(), r.optimizer_sharding ? "+zero1" : "", world,
              static_cast<long>(o.steps));
  for (const auto& s : r.steps) {
    std::printf(
        "step %3ld  loss %.4f  step %.1f ms  exposed comm %.1f ms  comm frac %.3f  spread %s\n",
        static_cast<long>(s.step), s.loss, s.step_seconds * 1e3, s.exposed_comm_seconds * 1e3,
        s.comm_fraction, s.param_spread ? std::to_string(*s.param_spread).c_str() : "-");
  }
  const auto& s = r.summary;
  if (!s.final_loss) {
    std::printf("no step trained: no loss and no step times\n");
    return;
  }
  std::printf(
      "final loss %.4f  median step %.1f ms (std %.1f)  %.0f tokens/s  comm fraction %.3f  "
      "max spread %.3g\n",
      *s.final_loss, s.median_step_seconds * 1e3, s.std_step_seconds * 1e3, s.tokens_per_second,
      s.median_comm_fraction, s.max_param_spread);
}

// `ddpd-worker run ddp`: the standalone run, with /metrics (the job's series) and a log line per
// step.
int run_ddp(const ddpd::DdpJobOptions& options, const ddpd::LocalRunOptions& local, bool json,
            ddpd::WorkerMetricsOptions metrics_options, const std::string& job_id) {
  std::unique_ptr<ddpd::WorkerMetrics> metrics;
  int rank = 0;
  ddpd::StandaloneHooks hooks;
  hooks.connected = [&](const ddpd::RendezvousOptions& r, const ddpd::Communicator& comm) {
    char host[256] = "?";
    gethostname(host, sizeof(host) - 1);
    spdlog::info("rank={} world={} local_rank={} host={} rendezvous at {}:{}", r.rank, r.world_size,
                 r.local_rank, host, r.master_addr, r.master_port);
    rank = r.rank;
    if (metrics_options.port > 0) metrics_options.port += r.local_rank;
    metrics = std::make_unique<ddpd::WorkerMetrics>(metrics_options);
    if (!comm.info().transport_note.empty()) spdlog::warn("{}", comm.info().transport_note);
    metrics->ddp_job_started(job_id, r.rank, enum_name(options.strategy),
                             enum_name(comm.info().transport));
  };
  hooks.trainer_ready = [&](const ddpd::Trainer& trainer) {
    metrics->record_memory(trainer.memory(), /*final_points=*/false);
  };
  hooks.step = [&](const ddpd::StepMetrics& s) {
    metrics->record_step(s);
    spdlog::info("rank={} step={} loss={:.4f} step_ms={:.2f}", rank, s.step, s.loss,
                 s.step_seconds * 1e3);
  };
  hooks.succeeded = [&](const ddpd::TrainingResult& result) {
    if (result.shared_buffers_fallback)
      spdlog::warn("{}", describe(*result.shared_buffers_fallback));
    metrics->record_memory(result.memory, /*final_points=*/true);
    metrics->job_finished(true);
  };
  ddpd::StandaloneOutput output{json, [&](const ddpd::TrainingResult& result, int world) {
                                  print_summary(options, world, result);
                                }};
  return ddpd::run_standalone(options, local, output, hooks);
}

int run_comm(const ddpd::CommJob& job, bool json) {
  const ddpd::CommBenchOptions& options = job.bench;
  ddpd::RendezvousOptions rendezvous;
  try {
    rendezvous = ddpd::rendezvous_from_environment();
    rendezvous.backend = job.backend;
    rendezvous.transport = job.transport;
    rendezvous.timeout =
        std::chrono::milliseconds(static_cast<int64_t>(job.collective_timeout_s * 1000));
    ddpd::validate(options);
    if (job.collective_timeout_s <= 0) throw ddpd::OptionError("--timeout", "must be > 0 seconds");
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  try {
    auto comm = ddpd::connect(rendezvous);
    const auto result = ddpd::run_comm_benchmark(options, *comm);
    if (result.shared_buffers_fallback)
      spdlog::warn("{}", describe(*result.shared_buffers_fallback));
    if (rendezvous.rank == 0) {
      std::cout << (json ? ddpd::to_json(result).dump() + "\n" : ddpd::comm_table(result));
    }
    return 0;
  } catch (const std::invalid_argument& e) {  // e.g. nccl in a CPU build, LOCAL_RANK past the GPUs
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    const std::string error = "rank " + std::to_string(rendezvous.rank) + ": " + e.what();
    if (rendezvous.rank == 0 && json) std::cout << ddpd::failure_json(error).dump() << std::endl;
    std::fprintf(stderr, "FAILED: %s\n", error.c_str());
    return 1;
  }
}

}  // namespace

// OpenMP threads that spin between parallel regions starve the thread doing the serial work
// on small machines (tiny model, 2 threads on 2 cores: 150 ms steps spinning vs 40 ms passive).
// libgomp reads OMP_WAIT_POLICY when it loads, before main, so the worker re-executes itself
// once with PASSIVE unless the user chose a policy.
void prefer_passive_openmp_threads(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  execv("/proc/self/exe", argv);  // returns only on failure: then run as we are
}

// `serve`'s flags (--memory-gb is converted once parsed).
void add_serve_flags(CLI::App& serve_cmd, ddpd::WorkerDaemonOptions& daemon_options,
                     double& memory_gb) {
  serve_cmd.add_option("--coordinator", daemon_options.coordinator, "Coordinator host:port")
      ->capture_default_str();
  serve_cmd.add_option("--token", daemon_options.token, "Shared token (default: $DDPD_TOKEN)");
  serve_cmd.add_option("--tls-ca", daemon_options.tls_ca, "PEM CA: connect with TLS");
  serve_cmd.add_option("--worker-id", daemon_options.worker_id, "Stable id (default host-pid-tag)");
  serve_cmd
      .add_option("--advertise-host", daemon_options.advertise_host,
                  "Address other ranks reach this worker at")
      ->capture_default_str();
  serve_cmd.add_option("--memory-gb", memory_gb,
                       "Memory a job's rank may use here, GB (10^9 B), advertised to the "
                       "coordinator's admission check (default: MemAvailable at start-up)");
  serve_cmd
      .add_option("--rendezvous-port", daemon_options.rendezvous_port,
                  "TCPStore port when rank 0 (0: pick a free one)")
      ->capture_default_str();
  serve_cmd
      .add_option("--cuda-device", daemon_options.cuda_device,
                  "GPU index for cuda/nccl jobs (CUDA builds; one daemon per GPU)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  // Bounded: 0 or less sent heartbeats in a busy loop (9 s of CPU in 8 s).
  serve_cmd
      .add_option("--heartbeat", daemon_options.heartbeat_seconds, "Heartbeat seconds (0.05 to 60)")
      ->capture_default_str()
      ->check(CLI::Range(0.05, 60.0));
  serve_cmd
      .add_option("--metrics-port", daemon_options.metrics.port,
                  "Serve Prometheus /metrics on this port (0: off)")
      ->capture_default_str();
  serve_cmd
      .add_option("--metrics-port-attempts", daemon_options.metrics.port_attempts,
                  "Try --metrics-port and the ports after it, up to this many (workers "
                  "started alike on one host, e.g. docker-compose --scale)")
      ->capture_default_str();
  serve_cmd
      .add_option("--metrics-host", daemon_options.metrics.bind_host,
                  "Address the /metrics endpoint listens on")
      ->capture_default_str();
  serve_cmd
      .add_option("--orphan-timeout", daemon_options.orphan_timeout_seconds,
                  "Seconds a rank trains on with no coordinator before it is stopped")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 7 * 24 * 3600.0));
  serve_cmd
      .add_option_function<double>(
          "--report-buffer-mb",
          [&daemon_options](double mb) {
            daemon_options.report_buffer_bytes = static_cast<int64_t>(mb * (1 << 20));
          },
          "Step reports and results kept until the coordinator stores them, MiB (default " +
              std::to_string(daemon_options.report_buffer_bytes >> 20) +
              "); past it step reports are dropped and counted")
      ->check(CLI::Range(1.0, 65536.0));
  serve_cmd.add_flag("!--no-prestart-rank", daemon_options.prestart_rank,
                     "Start each rank process when its assignment comes, instead of keeping the "
                     "next one started and waiting while the daemon is idle");
}

// `rank`: the process of one rank, started by `serve` for each assignment (rank_process.h).
static CLI::App* add_rank_command(CLI::App& app, ddpd::RankMainOptions& options) {
  auto* rank_cmd = app.add_subcommand("rank", "One rank of an assigned job (started by serve)");
  rank_cmd->group("");  // internal: not listed in --help
  rank_cmd->add_option("--advertise-host", options.advertise_host)->capture_default_str();
  rank_cmd->add_option("--cuda-device", options.cuda_device)->capture_default_str();
  rank_cmd->add_option("--progress-seconds", options.progress_seconds)
      ->capture_default_str()
      ->check(CLI::Range(0.01, 60.0));
  rank_cmd->add_option("--daemon-pid", options.daemon_pid);
  rank_cmd->add_option("--worker-id", options.worker_id);
  return rank_cmd;
}

// Exit codes: 0 written, 1 the checkpoint could not be read or the directory written, 2 --hf
// names a directory that is not empty (without --force).
static int run_export(const ddpd::ExportOptions& options) {
  try {
    ddpd::check_export_target(options.hf_dir, options.force);
    const int tensors =
        ddpd::export_checkpoint_to_hf(options.checkpoint, options.hf_dir, options.max_shard_bytes);
    std::printf("exported %d tensors of %s to %s\n", tensors, options.checkpoint.c_str(),
                options.hf_dir.c_str());
    return 0;
  } catch (const ddpd::OptionError& e) {  // --hf: a directory not empty
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

int main(int argc, char** argv) {
  ddpd::ignore_broken_pipes();
  ddpd::remove_stale_shm_segments();
  prefer_passive_openmp_threads(argv);
  keep_freed_memory_for_reuse();
  CLI::App app{"ddpd worker: runs DDP training, alone (run) or for a coordinator (serve)"};
  app.require_subcommand(1);
  app.fallthrough();  // --log-level/--log-format also after the subcommand
  auto* run = app.add_subcommand("run", "Run one job without a coordinator (torchrun-style env)");
  run->require_subcommand(1);
  auto* ddp = run->add_subcommand("ddp", "Data-parallel training of the Transformer LM");
  ddpd::DdpJobOptions options;
  bool json = false;
  ddpd::add_ddp_flags(*ddp, options);
  ddp->add_flag("--json", json, "Print the result as JSON (rank 0)");
  ddpd::WorkerMetricsOptions run_metrics;
  std::string run_job_id = "run";
  ddp->add_option("--metrics-port", run_metrics.port,
                  "Serve Prometheus /metrics on this port + LOCAL_RANK (0: off)")
      ->capture_default_str();
  ddp->add_option("--job-id", run_job_id, "The job_id label of the metrics")->capture_default_str();
  ddpd::LocalRunOptions local_run;
  ddpd::add_local_run_flags(*ddp, local_run);
  auto* comm_cmd = run->add_subcommand("comm", "Collective benchmark (nccl-tests style)");
  ddpd::CommJob comm_job;
  ddpd::add_comm_job_flags(*comm_cmd, comm_job);
  comm_cmd->add_flag("--json", json, "Print the result as JSON (rank 0)");
  auto* export_cmd = app.add_subcommand(
      "export", "Write a ddpd checkpoint as a Hugging Face model directory (docs/models.md)");
  ddpd::ExportOptions export_options;
  ddpd::add_export_flags(*export_cmd, export_options);
  auto* serve_cmd = app.add_subcommand("serve", "Register with a coordinator and run its jobs");
  ddpd::WorkerDaemonOptions daemon_options;
  double memory_gb = 0;
  add_serve_flags(*serve_cmd, daemon_options, memory_gb);
  ddpd::RankMainOptions rank_options;
  auto* rank_cmd = add_rank_command(app, rank_options);
  ddpd::LogOptions log_options;
  log_options.level = "warn";
  ddpd::add_log_flags(app, log_options);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());  // one line naming the flag
    return 2;
  } catch (const ddpd::OptionError& e) {  // from --sizes
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  try {
    ddpd::configure_logging(log_options);
  } catch (const ddpd::OptionError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  if (serve_cmd->parsed()) {
    if (memory_gb < 0) {
      std::fprintf(stderr, "error: --memory-gb: must be >= 0\n");
      return 2;
    }
    daemon_options.memory_bytes =
        memory_gb > 0 ? static_cast<int64_t>(memory_gb * 1e9) : ddpd::available_memory_bytes();
    daemon_options.rank_flags = {"--log-level", log_options.level, "--log-format",
                                 log_options.format};
    return serve(daemon_options);
  }
  if (rank_cmd->parsed()) return ddpd::run_rank_process(rank_options);

  if (comm_cmd->parsed()) return run_comm(comm_job, json);
  if (export_cmd->parsed()) return run_export(export_options);

  return run_ddp(options, local_run, json, run_metrics, run_job_id);
}
