// Prometheus metrics of one worker daemon: one prometheus-cpp registry served on --metrics-port.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ddpd/common/comm_options.h"     // CommBenchResult
#include "ddpd/common/training_result.h"  // StepMetrics, MemoryProfile (not trainer.h: LibTorch)

namespace ddpd {

struct WorkerMetricsOptions {
  int port = 0;                       // 0: no /metrics endpoint (nothing is recorded)
  std::string bind_host = "0.0.0.0";  // address the endpoint listens on
  int port_attempts = 1;  // try port … port + attempts - 1: workers started alike on one host
  int retained_jobs = 4;  // per-job series kept after a job ends, so the last ones stay
                          // scrapeable; older jobs' series are removed (bounded label sets)
};

// Series (labels job_id, rank, and strategy for training; no per-step labels):
//   ddpd_step_duration_seconds            histogram of step times
//   ddpd_step_phase_seconds{phase}        last step's forward, backward, optimizer, comm,
//                                         exposed_comm and checkpoint time; …_total sums
//   ddpd_comm_fraction, ddpd_loss, ddpd_tokens_per_second, ddpd_param_spread   last step's
//   ddpd_steps_total                      steps finished
//   ddpd_memory_bytes{kind, point}        parameters, gradients, optimizer_state, peak at
//                                         after_init, before_step, after_step
//                                         and tensors_peak at last_step (live CPU tensor bytes)
//                                         and activations_peak at last_step (docs/metrics.md)
//   ddpd_comm_{time_seconds, algbw_bytes_per_second, busbw_bytes_per_second}
//                                         {collective, size_bytes, world_size}: comm jobs
//   ddpd_worker_busy, ddpd_worker_jobs_total{kind, result}
//   ddpd_worker_connected, ddpd_worker_unacknowledged_report_bytes, ddpd_worker_dropped_reports
//
// Thread contract: one thread at a time records a job's series (the daemon's job thread, or main
// in `run`); record_session, which sets plain gauges only, from any thread;
// the /metrics endpoint's thread reads the registry on scrape, which prometheus-cpp makes safe.
// Only one job is current at a time.
class WorkerMetrics {
 public:
  // Throws std::runtime_error naming --metrics-port when no port can be bound.
  explicit WorkerMetrics(const WorkerMetricsOptions& options);
  int port() const;  // the port serving /metrics (0: none)
  ~WorkerMetrics();

  // The job now running; series recorded until the next start carry its labels.
  // `transport` (gloo, shm, nccl, none) labels every series of the job.
  void ddp_job_started(const std::string& job_id, int rank, const std::string& strategy,
                       const std::string& transport);
  void comm_job_started(const std::string& job_id, int rank, const std::string& transport);
  void record_step(const StepMetrics& step);
  void record_memory(const MemoryProfile& memory, bool final_points);
  void record_comm(const CommBenchResult& result);
  void job_finished(bool succeeded);
  // The coordinator session's state and the report buffer's (worker/report_log.h).
  void record_session(bool connected, int64_t kept_bytes, int64_t dropped);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddpd
