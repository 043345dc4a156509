// Daemon mode of ddpd-worker: registers with the coordinator and runs the jobs it assigns.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "worker_metrics.h"

namespace ddpd {

struct WorkerDaemonOptions {
  std::string coordinator = "127.0.0.1:50051";  // host:port of ddpd-coordinator
  std::string token;                            // shared control-plane token
  std::string tls_ca;                           // PEM CA file: connect with TLS when set
  std::string worker_id;                        // empty: "<hostname>-<pid>-<random tag>"
  std::string advertise_host = "127.0.0.1";     // address the other ranks reach this worker at
  int rendezvous_port = 0;                      // TCPStore port when rank 0; 0: a free port
  int cuda_device = 0;  // the GPU this worker's NCCL jobs use (one daemon per GPU)
  double heartbeat_seconds = 2.0;
  // Registering again after a session ended: capped exponential backoff with jitter
  // (reconnect_backoff.h): the first try within reconnect_first_seconds, then at most
  // reconnect_max_seconds between tries.
  double reconnect_first_seconds = 1.0;
  double reconnect_max_seconds = 10.0;
  // A rank kept running with no coordinator for this long is stopped (--orphan-timeout): the
  // job's other ranks are as cut off, and nobody would see its results.
  double orphan_timeout_seconds = 600.0;
  // Step reports and results kept until the coordinator acknowledges them (--report-buffer-mb;
  // report_log.h). A report of the small model with its spans is about 2 KB: 64 MiB holds some
  // 30,000, an outage of about an hour at 8 steps a second.
  int64_t report_buffer_bytes = 64LL << 20;
  WorkerMetricsOptions metrics;  // Prometheus /metrics (off unless metrics.port is set)
  // Advertised to the coordinator, which refuses jobs whose estimated per-rank memory exceeds
  // every worker's (docs/protocols.md). 0: unknown. main() sets it from --memory-gb, else
  // MemAvailable at start-up.
  int64_t memory_bytes = 0;
  std::vector<std::string> rank_flags;  // passed on to every rank process (its logging)
  // Keep the next assignment's rank process started and waiting (StartedRankProcess,
  // rank_process.h), started again once the daemon has been idle this long: a job that just
  // ended on this host is often a heal that has just begun beside it, whose cores a start would
  // take. --no-prestart-rank: start each rank process when its assignment comes.
  bool prestart_rank = true;
  double prestart_idle_seconds = 5.0;
};

// Protocol (worker side of the session, see coordinator_service.h):
//  hello → welcome; then, concurrently: heartbeats every heartbeat_seconds (while a DDP job
//  trains, each carries the rank's latest progress: phase, step, and its collective journal's
//  last enqueued/completed sequence numbers and oldest pending collective); for each
//  Assignment, one job thread starts the rank in its own process (rank_process.h), relays its
//  StepReports and ends with one JobResult: the rank's, or one saying how its process ended
//  (exit status, signal); the process is the one the daemon started ahead while idle, when it
//  has one. A cancel for the current job stops the rank's process: it aborts its
//  collectives and reports "cancelled", or is killed 1 s later. A rank's crash never ends the
//  daemon.
//
//  The rank outlives the session (docs/protocols.md, "Adoption"): steps and results go through a
//  ReportLog (report_log.h), kept until the coordinator acknowledges them. When the session ends
//  (a coordinator restart, a cut link) the rank trains on, and the daemon registers again with
//  backoff; its hello claims the rank (RankClaim: job, attempt, generation, rank, last step, the
//  process's state), and the new session first sends what was never acknowledged. A cancel in
//  answer to the claim stops the rank. After orphan_timeout_seconds without a session the rank
//  is stopped like a cancel.
//
// Thread contract: run() blocks on the calling thread until stop() (callable from any
// thread, e.g. a signal watcher); it owns the threads it starts: each session's reader (the
// calling thread), sender and heartbeat threads, the job thread (one assignment's, which
// outlives sessions) and the prestarter (the daemon's whole life: rank processes die with the
// thread that started them).
class WorkerDaemon {
 public:
  // Throws std::runtime_error when the metrics port cannot be bound.
  explicit WorkerDaemon(WorkerDaemonOptions options);
  ~WorkerDaemon();
  // Returns 0 after stop(), 1 when the coordinator refuses the worker (bad token, bad hello).
  int run();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddpd
