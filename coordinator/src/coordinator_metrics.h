// Prometheus metrics of the coordinator: one prometheus-cpp registry served on --metrics-port.
#pragma once

#include <grpcpp/support/server_interceptor.h>

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "state_counts.h"

namespace ddpd::coordinator {

struct CoordinatorMetricsOptions {
  int port = 9400;                    // 0: no /metrics endpoint
  std::string bind_host = "0.0.0.0";  // address the endpoint listens on
};

// Series:
//   ddpd_coordinator_workers{state}            workers by state
//   ddpd_coordinator_jobs{state}               jobs by state (the whole history in the store)
//   ddpd_coordinator_queue_length              jobs pending
//   ddpd_coordinator_rpcs_total{method, code}  finished RPCs by method and gRPC status code
//   ddpd_coordinator_step_reports_total        per-rank step reports received
//   ddpd_coordinator_message_seconds{kind}     worker-session messages (heartbeat, step,
//                                              result): arrival to end of handling, histogram
//   ddpd_rank_compute_score{job_id, rank}      straggler score: 1 / this rank's median compute
//                                              relative to the other ranks' median
//   ddpd_coordinator_heals_total               lost ranks replaced in place (docs/healing.md)
//   ddpd_coordinator_heal_seconds              from a loss seen to the healed group's first
//                                              complete step, histogram
//
// Thread contract: count_* are called from gRPC's threads (prometheus-cpp counters are
// thread-safe); `snapshot` is called on a scrape, from the endpoint's thread, and must take
// whatever lock the state needs.
class CoordinatorMetrics {
 public:
  // Throws std::runtime_error naming --metrics-port when the port cannot be bound.
  CoordinatorMetrics(const CoordinatorMetricsOptions& options,
                     std::function<StateCounts()> snapshot);
  ~CoordinatorMetrics();

  void count_rpc(const std::string& method, grpc::StatusCode code);
  void count_step_report();
  void observe_message(const char* kind, double seconds);

  // For grpc::ServerBuilder::experimental().SetInterceptorCreators: counts every RPC's final
  // status (authentication refusals included) under its method's short name.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> rpc_counter();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A gRPC status code as a label value, as go-grpc-prometheus writes it ("OK",
// "InvalidArgument", "Unauthenticated", …).
std::string status_code_name(grpc::StatusCode code);

}  // namespace ddpd::coordinator
