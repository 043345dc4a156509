#include "control_client.h"

#include "ddpd/service/channel.h"

namespace ddpd::client {
namespace {

const char* code_name(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    default:
      return "ERROR";
  }
}

void check(const grpc::Status& status) {
  if (!status.ok()) throw RpcError(status);
}

}  // namespace

RpcError::RpcError(const grpc::Status& status)
    : std::runtime_error(std::string(code_name(status.error_code())) + ": " +
                         status.error_message()),
      exit_code_(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT ? 2 : 1) {}

ControlClient::ControlClient(const ConnectionOptions& options)
    : token_(options.token),
      stub_(v1::Coordinator::NewStub(coordinator_channel(options.coordinator, options.tls_ca))) {}

void ControlClient::prepare(grpc::ClientContext& context) const {
  if (!token_.empty()) context.AddMetadata("authorization", "Bearer " + token_);
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
}

v1::Job ControlClient::submit(const v1::JobSpec& spec, const std::string& resumes_job_id) {
  grpc::ClientContext context;
  prepare(context);
  v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  request.set_resumes_job_id(resumes_job_id);
  v1::Job reply;
  check(stub_->SubmitJob(&context, request, &reply));
  return reply;
}

v1::GetJobReply ControlClient::get(const std::string& job_id, bool with_steps) {
  grpc::ClientContext context;
  prepare(context);
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  request.set_with_steps(with_steps);
  v1::GetJobReply reply;
  check(stub_->GetJob(&context, request, &reply));
  return reply;
}

v1::ListJobsReply ControlClient::list() {
  grpc::ClientContext context;
  prepare(context);
  v1::ListJobsReply reply;
  check(stub_->ListJobs(&context, v1::ListJobsRequest(), &reply));
  return reply;
}

v1::Job ControlClient::cancel(const std::string& job_id) {
  grpc::ClientContext context;
  prepare(context);
  v1::CancelJobRequest request;
  request.set_job_id(job_id);
  v1::Job reply;
  check(stub_->CancelJob(&context, request, &reply));
  return reply;
}

v1::ListWorkersReply ControlClient::workers() {
  grpc::ClientContext context;
  prepare(context);
  v1::ListWorkersReply reply;
  check(stub_->ListWorkers(&context, v1::ListWorkersRequest(), &reply));
  return reply;
}

v1::JobState ControlClient::watch(const std::string& job_id,
                                  const std::function<void(const v1::JobEvent&)>& on_event) {
  grpc::ClientContext context;
  if (!token_.empty()) context.AddMetadata("authorization", "Bearer " + token_);
  v1::WatchJobRequest request;
  request.set_job_id(job_id);
  auto reader = stub_->WatchJob(&context, request);
  v1::JobEvent event;
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  while (reader->Read(&event)) {
    if (event.has_transition()) state = event.transition().state();
    on_event(event);
  }
  check(reader->Finish());
  return state;
}

}  // namespace ddpd::client
