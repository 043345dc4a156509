// The coordinator's gRPC service: worker registry, FIFO scheduling, rendezvous hand-out, the
// job state machine and per-step metric aggregation, all persisted in a JobStore.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "coordinator_metrics.h"
#include "ddpd/v1/ddpd.grpc.pb.h"
#include "job_store.h"

namespace ddpd::coordinator {

struct CoordinatorOptions {
  std::string token;                                // required on every RPC; empty: none
  std::chrono::milliseconds worker_timeout{15000};  // no heartbeat for this long → lost
  std::chrono::milliseconds pending_timeout{0};     // pending longer → FAILED (0: wait)
  // Limits, each refused with RESOURCE_EXHAUSTED naming it when exceeded (docs/protocols.md).
  int64_t max_pending_jobs = 10000;  // SubmitJob while this many jobs are PENDING
  int max_watchers_per_job = 64;     // concurrent WatchJob streams on one job
  // Step reports stored per job (every rank's, every step); later ones are dropped, with one
  // `limit` incident on the job. 10^7: 1,024 ranks × ~10,000 steps.
  int64_t max_step_reports_per_job = 10000000;
  // Largest request the server accepts, bytes (grpc::ServerBuilder::SetMaxReceiveMessageSize,
  // set by main; gRPC answers RESOURCE_EXHAUSTED above it). 4 MiB, gRPC's own default.
  int max_message_bytes = 4 << 20;
  // Bytes queued for one worker session and not yet taken by gRPC. A worker that stops reading
  // is cancelled (LOST, "stopped reading") once this is passed, rather than blocking the
  // coordinator or growing its memory. 1 MiB holds thousands of assignments.
  int64_t max_session_queue_bytes = 1 << 20;
  // Prometheus file-based service discovery: when set, the coordinator rewrites this file
  // (atomically) whenever a worker registers or is lost, listing advertised_host:metrics_port
  // of every worker with a live session, so Prometheus scrapes the workers that run and no
  // others. Empty: none.
  std::string prometheus_targets;
};

// Protocol (job lifecycle), all under one mutex:
//  1. SubmitJob validates the spec (INVALID_ARGUMENT naming the field), stores it PENDING.
//  2. schedule(): the oldest PENDING job starts once world_size workers are idle: ranks go
//     in registration order; rank 0's advertised host and rendezvous port form the TCPStore
//     endpoint; each worker gets an Assignment on its session stream; the job is RUNNING.
//  3. Workers stream StepReports (stored per rank; aggregated per step once every rank
//     reported it) and finally a JobResult; the job is SUCCEEDED when every rank succeeded,
//     FAILED at the first failure (the other ranks are told to cancel).
//  4. A worker whose session ends, or that misses heartbeats for worker_timeout, is lost: its
//     job FAILS with the reason and the other ranks are cancelled; each returns to IDLE when
//     it reports its (cancelled) result.
//  5. CancelJob marks the job CANCELLED and sends cancel to its workers.
//  6. Stall watch (DDP jobs): every heartbeat carries the rank's progress (phase, step, its
//     collective journal's last enqueued/completed sequence numbers and oldest pending
//     collective). When no rank has completed a collective or a step for --stall-seconds, the
//     reaper records an incident naming the waiting ranks, the collective they wait in and the
//     ranks that have not joined it (or a desync), once per stall; --on-stall fail then fails the
//     job with that text and cancels its ranks.
//  7. Restarts (DDP jobs with --max-restarts N): a lost worker, a failed rank or a stall under
//     --on-stall fail sends the job back to PENDING instead of FAILED, while fewer than N restarts
//     were made; its ranks are cancelled. Each Assignment carries the attempt number, echoed in
//     step reports and results, so reports of a cancelled attempt are ignored. The next attempt
//     runs with --resume auto (the latest checkpoint under --checkpoint-dir), at the job's world
//     size, or at the largest size down to --min-world-size that idle workers and the global batch
//     allow; a `restart` incident records why, the world sizes and the checkpoint step.
// On start, jobs found RUNNING in the store are restarted the same way when restarts are left,
// else marked FAILED ("coordinator restarted").
//
// Thread contract: gRPC calls handlers on its own threads; all state is guarded by mutex_.
// Session streams are written only by their SessionOutbox's thread; senders (under mutex_)
// only queue, so no worker can block the coordinator. A reaper thread enforces timeouts.
class CoordinatorService final : public v1::Coordinator::Service {
 public:
  CoordinatorService(CoordinatorOptions options, std::unique_ptr<JobStore> store);
  ~CoordinatorService() override;

  grpc::Status WorkerSession(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::WorkerMessage>* stream) override;
  grpc::Status SubmitJob(grpc::ServerContext* context, const v1::SubmitJobRequest* request,
                         v1::Job* reply) override;
  grpc::Status GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                      v1::GetJobReply* reply) override;
  grpc::Status ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest* request,
                        v1::ListJobsReply* reply) override;
  grpc::Status CancelJob(grpc::ServerContext* context, const v1::CancelJobRequest* request,
                         v1::Job* reply) override;
  grpc::Status WatchJob(grpc::ServerContext* context, const v1::WatchJobRequest* request,
                        grpc::ServerWriter<v1::JobEvent>* writer) override;
  grpc::Status ListWorkers(grpc::ServerContext* context, const v1::ListWorkersRequest* request,
                           v1::ListWorkersReply* reply) override;

  // Ends worker sessions and the reaper (call before the server shuts down).
  void shutdown();

  // Workers and jobs by state, and the pending queue's length (for /metrics).
  StateCounts state_counts() const;
  // Called for every per-rank step report received (for /metrics); set before serving.
  void on_step_report(std::function<void()> callback) { on_step_report_ = std::move(callback); }
  // Called for every message of a worker session once it is handled, with its kind (heartbeat,
  // step, result) and the seconds from its arrival to the end of its handling (waiting for the
  // service's lock included). Called from gRPC's threads. Set before serving.
  void on_message_handled(std::function<void(const char* kind, double seconds)> callback) {
    on_message_handled_ = std::move(callback);
  }

 private:
  struct Session;
  struct WorkerEntry;
  struct JobEntry;

  grpc::Status authorize(const grpc::ServerContext& context) const;
  void transition(JobEntry& job, v1::JobState to, const std::string& reason);
  void schedule();
  void fail_job(JobEntry& job, const std::string& reason);
  // A DDP job with restarts left goes back to PENDING (its ranks cancelled) to resume from its
  // latest checkpoint; any other job FAILS.
  void fail_or_restart(JobEntry& job, const std::string& reason);
  void cancel_workers(JobEntry& job);
  void record_step(JobEntry& job, const v1::StepReport& step);
  // Rewrites options_.prometheus_targets from the registry (call with mutex_ held).
  void write_prometheus_targets();
  // Stall watch: a rank's heartbeat progress, and the reaper's check (an incident, and the job
  // FAILED with the analysis under --on-stall fail).
  void record_progress(JobEntry& job, int rank, const v1::RankProgress& progress);
  void check_stall(JobEntry& job, std::chrono::steady_clock::time_point now);
  void record_incident(JobEntry& job, const std::string& kind, int rank,
                       const std::string& message);
  void record_result(WorkerEntry& worker, const v1::JobResult& result);
  void worker_lost(const std::string& worker_id, Session* session, const std::string& reason);
  void reap();
  JobEntry* find_job(const std::string& job_id);

  CoordinatorOptions options_;
  std::unique_ptr<JobStore> store_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;  // any job event; watchers wait on it
  std::map<std::string, std::unique_ptr<WorkerEntry>> workers_;
  std::vector<std::string> worker_order_;  // registration order, for rank assignment
  std::map<std::string, std::unique_ptr<JobEntry>> jobs_;
  std::vector<std::string> job_order_;  // submission order
  int64_t next_sequence_ = 1;
  bool stopping_ = false;
  std::thread reaper_;
  std::function<void()> on_step_report_;
  std::function<void(const char*, double)> on_message_handled_;
};

}  // namespace ddpd::coordinator
