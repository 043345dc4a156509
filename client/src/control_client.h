// ddpctl's connection to the coordinator: credentials, the token, retries while the coordinator
// is unavailable (--wait), and gRPC errors turned into CLI errors.
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "ddpd/v1/ddpd.grpc.pb.h"

namespace ddpd::client {

struct ConnectionOptions {
  std::string coordinator = "127.0.0.1:50051";
  std::string token;   // --token, else $DDPD_TOKEN
  std::string tls_ca;  // PEM CA: TLS when set
  // --wait: how long reads, submits and watches keep retrying a coordinator that is unavailable
  // (restarting); 0: fail at once.
  double wait_seconds = 30;
};

// A failed RPC: what() is "CODE: message", and for a refusal the user fixes with a flag (a missing
// or wrong token, no coordinator at `address`) the flag or variable to set; exit_code() is 2 for
// INVALID_ARGUMENT, else 1.
class RpcError : public std::runtime_error {
 public:
  // `tls`: whether the client was given --tls-ca (what an unanswered call's hint suggests).
  explicit RpcError(const grpc::Status& status, const std::string& address = "", bool tls = false);
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

class WatchDedup;

// Reads (get, list, workers, watch) retry UNAVAILABLE, CANCELLED (by a coordinator shutting
// down), and a deadline that passed before the channel connected, for up to --wait (rpc_retry.h's
// backoff), saying so once on stderr per outage; then they throw the last RpcError. submit retries
// too: its request id makes a retry after a lost reply return the job already created. cancel is
// tried once. Thread contract: one thread at a time per ControlClient.
class ControlClient {
 public:
  using EventHandler = std::function<void(const v1::JobEvent&)>;

  explicit ControlClient(const ConnectionOptions& options);

  // `resumes_job_id`: the job whose checkpoint this one continues (ddpctl resume), or empty.
  v1::Job submit(const v1::JobSpec& spec, const std::string& resumes_job_id = "");
  v1::GetJobReply get(const std::string& job_id, bool with_steps);
  v1::ListJobsReply list();
  v1::Job cancel(const std::string& job_id);
  v1::ListWorkersReply workers();
  // Calls on_event for each event until the job ends; returns the final state. A stream that
  // breaks first is opened again, and the replay's events already passed are left out.
  v1::JobState watch(const std::string& job_id, const EventHandler& on_event);

 private:
  using Call = std::function<grpc::Status(grpc::ClientContext&)>;
  // Runs `call` until it succeeds, fails for a reason a retry cannot change, or --wait is spent.
  grpc::Status with_retry(const Call& call);
  bool retryable(const grpc::Status& status) const;
  // The one line per outage that says ddpctl is waiting, and why.
  void announce_retry(const grpc::Status& status);
  // Waits `seconds` before the next try, or less once the channel connects again.
  void pause_for(double seconds);
  // One WatchJob stream, to its end; `connected` is set once it delivered an event.
  grpc::Status watch_stream(const std::string& job_id, WatchDedup& dedup, v1::JobState& state,
                            bool& connected, const EventHandler& on_event);
  void prepare(grpc::ClientContext& context) const;
  // Throws RpcError (naming address_ where it helps) unless `status` is OK.
  void check(const grpc::Status& status) const;

  std::string address_;
  bool tls_;
  std::string token_;
  double wait_seconds_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  bool announced_ = false;  // this outage's line is printed
};

}  // namespace ddpd::client
