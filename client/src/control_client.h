// ddpctl's connection to the coordinator: credentials, the token, and gRPC errors turned into
// CLI errors.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "ddpd/v1/ddpd.grpc.pb.h"

namespace ddpd::client {

struct ConnectionOptions {
  std::string coordinator = "127.0.0.1:50051";
  std::string token;   // --token, else $DDPD_TOKEN
  std::string tls_ca;  // PEM CA: TLS when set
};

// A failed RPC: what() is "CODE: message"; exit_code() is 2 for INVALID_ARGUMENT, else 1.
class RpcError : public std::runtime_error {
 public:
  explicit RpcError(const grpc::Status& status);
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

class ControlClient {
 public:
  explicit ControlClient(const ConnectionOptions& options);

  // `resumes_job_id`: the job whose checkpoint this one continues (ddpctl resume), or empty.
  v1::Job submit(const v1::JobSpec& spec, const std::string& resumes_job_id = "");
  v1::GetJobReply get(const std::string& job_id, bool with_steps);
  v1::ListJobsReply list();
  v1::Job cancel(const std::string& job_id);
  v1::ListWorkersReply workers();
  // Calls on_event for each event until the job ends; returns the final state.
  v1::JobState watch(const std::string& job_id,
                     const std::function<void(const v1::JobEvent&)>& on_event);

 private:
  void prepare(grpc::ClientContext& context) const;
  std::string token_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

}  // namespace ddpd::client
