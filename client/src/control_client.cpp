#include "control_client.h"

#include <chrono>
#include <cstdio>
#include <optional>
#include <thread>

#include "ddpd/service/channel.h"
#include "rpc_retry.h"
#include "watch_dedup.h"

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
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    default:
      return "ERROR";
  }
}

// What to do about a refusal the user can fix from the command line: the flag or variable to set.
std::string hint(const grpc::Status& status, const std::string& address, bool tls) {
  switch (status.error_code()) {
    case grpc::StatusCode::UNAUTHENTICATED:
      return status.error_message().find("missing") != std::string::npos
                 ? " (set $DDPD_TOKEN or pass --token: the coordinator's shared token)"
                 : " (--token or $DDPD_TOKEN differs from the coordinator's token)";
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      if (address.empty()) return "";
      // A plaintext client at a TLS coordinator, or the reverse, is refused like an absent one.
      return " (no coordinator answered at " + address +
             ": pass --coordinator HOST:PORT, the address its --listen serves" +
             (tls ? "; --tls-ca is given: is it a coordinator started with --tls-cert?)"
                  : "; a coordinator started with --tls-cert needs --tls-ca CA.pem here)");
    default:
      return "";
  }
}

bool is_terminal(v1::JobState state) {
  return state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

RpcError::RpcError(const grpc::Status& status, const std::string& address, bool tls)
    : std::runtime_error(std::string(code_name(status.error_code())) + ": " +
                         status.error_message() + hint(status, address, tls)),
      exit_code_(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT ? 2 : 1) {}

ControlClient::ControlClient(const ConnectionOptions& options)
    : address_(options.coordinator),
      tls_(!options.tls_ca.empty()),
      token_(options.token),
      wait_seconds_(options.wait_seconds),
      channel_(coordinator_channel(options.coordinator, options.tls_ca)),
      stub_(v1::Coordinator::NewStub(channel_)) {}

void ControlClient::check(const grpc::Status& status) const {
  if (!status.ok()) throw RpcError(status, address_, tls_);
}

void ControlClient::prepare(grpc::ClientContext& context) const {
  if (!token_.empty()) context.AddMetadata("authorization", "Bearer " + token_);
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
}

bool ControlClient::retryable(const grpc::Status& status) const {
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) return true;
  // ddpctl never cancels its own calls: this is a coordinator shutting down (it cancels the
  // calls that arrive meanwhile).
  if (status.error_code() == grpc::StatusCode::CANCELLED) return true;
  // A deadline that passed before the channel ever connected: no coordinator saw the request.
  return status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
         channel_->GetState(false) != GRPC_CHANNEL_READY;
}

void ControlClient::announce_retry(const grpc::Status& status) {
  if (announced_) return;
  announced_ = true;
  std::fprintf(stderr,
               "ddpctl: coordinator %s unavailable (%s); retrying for up to %s s (--wait)\n",
               address_.c_str(), RpcError(status).what(), seconds_text(wait_seconds_).c_str());
}

// Waiting on the channel, not asleep: gRPC reads a connection attempt's replies only while
// something polls the channel, and asleep nothing did but its backup poller (every 5 s). A TLS
// handshake, several round trips, then missed its 2 s connect deadline (service/channel.cpp)
// again and again: a ddpctl started 1.5 s before a TLS coordinator waited out all 40 s of its
// --wait; waiting on the channel, it connects within a second of the coordinator's start.
void ControlClient::pause_for(double seconds) {
  const auto deadline = std::chrono::system_clock::now() +
                        std::chrono::duration_cast<std::chrono::system_clock::duration>(
                            std::chrono::duration<double>(seconds));
  const bool was_ready = channel_->GetState(false) == GRPC_CHANNEL_READY;
  while (std::chrono::system_clock::now() < deadline) {
    const grpc_connectivity_state state = channel_->GetState(/*try_to_connect=*/true);
    if (state == GRPC_CHANNEL_READY && !was_ready) return;  // connected again: try now
    channel_->WaitForStateChange(state, deadline);
  }
}

grpc::Status ControlClient::with_retry(const Call& call) {
  Backoff backoff(wait_seconds_);
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    grpc::ClientContext context;
    prepare(context);
    const grpc::Status status = call(context);
    if (status.ok()) announced_ = false;  // the outage is over; a later one is announced again
    if (!retryable(status)) return status;
    const std::optional<double> pause = backoff.next(seconds_since(start));
    if (!pause) return status;
    announce_retry(status);
    pause_for(*pause);
  }
}

v1::Job ControlClient::submit(const v1::JobSpec& spec, const std::string& resumes_job_id) {
  v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  request.set_resumes_job_id(resumes_job_id);
  // One id for every try of this submission: the coordinator answers a retry whose first try
  // created the job (its reply lost) with that job, not a second one.
  request.set_request_id(random_request_id());
  v1::Job reply;
  check(with_retry(
      [&](grpc::ClientContext& context) { return stub_->SubmitJob(&context, request, &reply); }));
  return reply;
}

v1::GetJobReply ControlClient::get(const std::string& job_id, bool with_steps) {
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  request.set_with_steps(with_steps);
  v1::GetJobReply reply;
  check(with_retry(
      [&](grpc::ClientContext& context) { return stub_->GetJob(&context, request, &reply); }));
  return reply;
}

v1::ListJobsReply ControlClient::list() {
  v1::ListJobsReply reply;
  check(with_retry([&](grpc::ClientContext& context) {
    return stub_->ListJobs(&context, v1::ListJobsRequest(), &reply);
  }));
  return reply;
}

v1::Job ControlClient::cancel(const std::string& job_id) {
  // Tried once: a write without an id to make a retry safe is the caller's to repeat.
  grpc::ClientContext context;
  prepare(context);
  v1::CancelJobRequest request;
  request.set_job_id(job_id);
  v1::Job reply;
  check(stub_->CancelJob(&context, request, &reply));
  return reply;
}

v1::ListWorkersReply ControlClient::workers() {
  v1::ListWorkersReply reply;
  check(with_retry([&](grpc::ClientContext& context) {
    return stub_->ListWorkers(&context, v1::ListWorkersRequest(), &reply);
  }));
  return reply;
}

grpc::Status ControlClient::watch_stream(const std::string& job_id, WatchDedup& dedup,
                                         v1::JobState& state, bool& connected,
                                         const EventHandler& on_event) {
  grpc::ClientContext context;  // no deadline: a watch lasts as long as the job
  if (!token_.empty()) context.AddMetadata("authorization", "Bearer " + token_);
  v1::WatchJobRequest request;
  request.set_job_id(job_id);
  auto reader = stub_->WatchJob(&context, request);
  dedup.new_stream();
  v1::JobEvent event;
  std::optional<v1::JobEvent> end;  // the job's final transition
  while (reader->Read(&event)) {
    connected = true;
    // Every transition, printed before or not: the stream's last one is the job's state.
    if (event.has_transition()) state = event.transition().state();
    if (!dedup.admit(event)) continue;
    // Last, as a stream that never broke has it: a restarted coordinator replays the stored
    // transitions before the steps.
    if (event.has_transition() && is_terminal(event.transition().state())) {
      end = event;
    } else {
      on_event(event);
    }
  }
  const grpc::Status status = reader->Finish();
  if (end) on_event(*end);
  return status;
}

v1::JobState ControlClient::watch(const std::string& job_id, const EventHandler& on_event) {
  WatchDedup dedup;
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  std::optional<Backoff> backoff;  // set while the coordinator is away
  auto outage_start = std::chrono::steady_clock::now();
  for (;;) {
    bool connected = false;
    grpc::Status status = watch_stream(job_id, dedup, state, connected, on_event);
    if (!status.ok() && !retryable(status)) throw RpcError(status, address_, tls_);
    if (is_terminal(state)) return state;
    // The coordinator ends every stream when it stops, before the job has ended.
    if (status.ok()) status = {grpc::StatusCode::UNAVAILABLE, "the watch ended before the job did"};
    if (connected || !backoff) {  // a new outage: --wait counts from here
      if (connected) announced_ = false;
      backoff.emplace(wait_seconds_);
      outage_start = std::chrono::steady_clock::now();
    }
    const std::optional<double> pause = backoff->next(seconds_since(outage_start));
    if (!pause) throw RpcError(status, address_, tls_);
    announce_retry(status);
    pause_for(*pause);
  }
}

}  // namespace ddpd::client
