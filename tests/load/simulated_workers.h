// Simulated worker sessions for ddpd-loadgen: real gRPC WorkerSession streams that say hello,
// heartbeat at the daemon's interval, accept assignments and stream step reports at a set rate,
// without training anything.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ddpd/v1/ddpd.grpc.pb.h"

namespace ddpd::load {

struct SimulatedWorkersOptions {
  std::string coordinator;              // host:port
  std::string token;                    // control-plane token ("" : none)
  int workers = 1000;                   // sessions
  double heartbeat_seconds = 2.0;       // as ddpd-worker serve's default
  double step_reports_per_second = 10;  // per assigned session
  int sessions_per_channel = 100;       // HTTP/2 connections: one per this many sessions
  int writer_threads = 4;               // threads that send heartbeats and step reports
};

// Thread contract: the constructor opens every session (a reader thread each) and starts the
// writer threads; counters are atomics readable from any thread; finish_jobs() and the
// destructor are called from the owning thread.
class SimulatedWorkers {
 public:
  explicit SimulatedWorkers(const SimulatedWorkersOptions& options);
  ~SimulatedWorkers();
  SimulatedWorkers(const SimulatedWorkers&) = delete;
  SimulatedWorkers& operator=(const SimulatedWorkers&) = delete;

  // Sessions welcomed so far.
  int welcomed() const { return welcomed_.load(); }
  // Sessions holding an assignment of `job_id` (all: "").
  int assigned(const std::string& job_id = "") const;
  // Step reports written so far.
  int64_t step_reports_sent() const { return step_reports_sent_.load(); }
  int64_t heartbeats_sent() const { return heartbeats_sent_.load(); }
  // Every assigned session sends a succeeded JobResult and becomes idle; returns how many.
  int finish_jobs();
  // Stops sending step reports (heartbeats go on).
  void pause_steps() { steps_paused_.store(true); }

 private:
  struct Session;
  void read_loop(Session& session);
  void write_loop(size_t first, size_t stride);

  SimulatedWorkersOptions options_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<Session>> sessions_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> steps_paused_{false};
  std::atomic<int> welcomed_{0};
  std::atomic<int64_t> step_reports_sent_{0};
  std::atomic<int64_t> heartbeats_sent_{0};
};

}  // namespace ddpd::load
