// The coordinator's gRPC service: the API of docs/protocols.md over a JobManager.
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

#include "coordinator_options.h"
#include "ddpd/v1/ddpd.grpc.pb.h"
#include "job_manager.h"
#include "job_store.h"
#include "lifecycle_clock.h"
#include "state_counts.h"

namespace ddpd::coordinator {

// The job lifecycle itself (its protocol, written down) is JobManager's (job_manager.h); this
// class is its gRPC face: authentication, validation of requests, the lock, and the streams.
//
// Thread contract: gRPC calls handlers on its own threads; the JobManager and the watcher counts
// are guarded by mutex_, and every manager call is made under it. Session streams are written
// only by their SessionOutbox's thread; the manager (under mutex_) only queues, so no worker can
// block the coordinator. A reaper thread calls JobManager::tick twice a second.
// Errors: refusals become their gRPC status naming the field; the store's exceptions become
// INTERNAL (the request is not applied past the failed write).
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

  grpc::Status authorize(const grpc::ServerContext& context) const;
  // Reads the session's messages until it ends, handing each to the manager.
  void serve_session(const std::string& worker_id,
                     grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::WorkerMessage>* stream);
  void reap();

  CoordinatorOptions options_;
  std::unique_ptr<JobStore> store_;
  SystemClock clock_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;      // any job event; watchers and the reaper wait on it
  JobManager manager_;                   // guarded by mutex_
  std::map<std::string, int> watchers_;  // WatchJob streams open, by job id
  std::thread reaper_;
  std::function<void()> on_step_report_;
  std::function<void(const char*, double)> on_message_handled_;
};

}  // namespace ddpd::coordinator
