#include "coordinator_service.h"

#include <spdlog/spdlog.h>

#include <string_view>

#include "ddpd/api/session_protocol.h"
#include "ddpd/api/spec_convert.h"
#include "ddpd/common/memory_estimate.h"
#include "session_outbox.h"

namespace ddpd::coordinator {
namespace {

// Token comparison whose time does not depend on where the strings first differ (only on the
// presented string's length), so timing cannot reveal a prefix of the token.
bool constant_time_equals(std::string_view presented, std::string_view expected) {
  unsigned char difference = presented.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < presented.size(); ++i) {
    const unsigned char want = expected.empty() ? 0 : expected[i % expected.size()];
    difference |= static_cast<unsigned char>(presented[i]) ^ want;
  }
  return difference == 0;
}

grpc::Status to_status(const Refusal& refusal) {
  switch (refusal.code) {
    case Refusal::Code::kNotFound:
      return {grpc::StatusCode::NOT_FOUND, refusal.message};
    case Refusal::Code::kAlreadyExists:
      return {grpc::StatusCode::ALREADY_EXISTS, refusal.message};
    case Refusal::Code::kResourceExhausted:
      return {grpc::StatusCode::RESOURCE_EXHAUSTED, refusal.message};
    case Refusal::Code::kFailedPrecondition:
      return {grpc::StatusCode::FAILED_PRECONDITION, refusal.message};
    case Refusal::Code::kUnavailable:
      return {grpc::StatusCode::UNAVAILABLE, refusal.message};
  }
  return {grpc::StatusCode::UNKNOWN, refusal.message};
}

// Runs `handle` (a manager call under the lock), answering INTERNAL when the store fails.
template <class Handle>
grpc::Status guarded(const char* what, Handle&& handle) {
  try {
    return handle();
  } catch (const std::exception& e) {
    spdlog::error("{}: {}", what, e.what());
    return {grpc::StatusCode::INTERNAL, std::string(what) + ": " + e.what()};
  }
}

// A summary of the job, of a size that does not grow with it (GetJob has the whole job): with
// 10,000 jobs in history, or specs with thousands of comm sizes, whole jobs would pass gRPC's
// 4 MiB default message limit of the clients.
void summarize(const v1::Job& whole, v1::Job* job) {
  job->set_job_id(whole.job_id());
  *job->mutable_spec() = whole.spec();
  if (job->spec().has_comm()) job->mutable_spec()->mutable_comm()->clear_sizes_bytes();
  job->set_state(whole.state());
  if (whole.history_size() > 0) *job->add_history() = whole.history(0);
  if (whole.history_size() > 1) *job->add_history() = whole.history(whole.history_size() - 1);
  job->set_error(whole.error());
  job->set_pending_reason(whole.pending_reason());
  job->set_attempts(whole.attempts());
}

}  // namespace

// A worker session as the JobManager sees it: messages go to the outbox (never waiting on the
// worker), and disconnect() cancels the RPC, whose handler then reports the loss.
struct CoordinatorService::Session final : WorkerLink {
  grpc::ServerContext* context;
  std::unique_ptr<SessionOutbox> outbox;  // closed by the session's handler before it returns

  void send(const v1::CoordinatorMessage& message) override { outbox->send(message); }
  void disconnect() override { context->TryCancel(); }
};

CoordinatorService::CoordinatorService(CoordinatorOptions options, std::unique_ptr<JobStore> store)
    : options_(std::move(options)),
      store_(std::move(store)),
      manager_(options_, *store_, clock_, [this] { changed_.notify_all(); }) {
  reaper_ = std::thread([this] { reap(); });
}

CoordinatorService::~CoordinatorService() { shutdown(); }

void CoordinatorService::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (manager_.stopping()) return;
    manager_.stop();
  }
  changed_.notify_all();
  if (reaper_.joinable()) reaper_.join();
}

void CoordinatorService::reap() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!manager_.stopping()) {
    changed_.wait_for(lock, std::chrono::milliseconds(500));
    try {
      manager_.tick();
    } catch (const std::exception& e) {
      spdlog::error("reaper: {}", e.what());
    }
  }
}

grpc::Status CoordinatorService::authorize(const grpc::ServerContext& context) const {
  if (options_.token.empty()) return grpc::Status::OK;
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return {grpc::StatusCode::UNAUTHENTICATED, "missing token (authorization metadata)"};
  }
  if (!constant_time_equals(std::string_view(it->second.data(), it->second.size()),
                            "Bearer " + options_.token)) {
    return {grpc::StatusCode::UNAUTHENTICATED, "invalid token"};
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::WorkerSession(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::WorkerMessage>* stream) {
  if (auto status = authorize(*context); !status.ok()) return status;
  v1::WorkerMessage message;
  if (!stream->Read(&message) || !message.has_hello()) {
    return {grpc::StatusCode::INVALID_ARGUMENT, "hello: the first session message must be hello"};
  }
  const v1::WorkerHello hello = message.hello();
  if (hello.worker_id().empty()) return {grpc::StatusCode::INVALID_ARGUMENT, "worker_id: empty"};
  if (hello.rendezvous_port() <= 0 || hello.rendezvous_port() > 65535) {
    return {grpc::StatusCode::INVALID_ARGUMENT, "rendezvous_port: must be in 1..65535"};
  }
  if (const std::string refusal = session_protocol_refusal(hello.protocol_version());
      !refusal.empty()) {
    spdlog::warn("worker={} refused: {}", hello.worker_id(), refusal);
    return {grpc::StatusCode::FAILED_PRECONDITION, refusal};
  }
  auto session = std::make_shared<Session>();
  session->context = context;
  session->outbox = std::make_unique<SessionOutbox>(context, stream, hello.worker_id(),
                                                    options_.max_session_queue_bytes);
  struct CloseOutbox {  // every return below: the stream must outlive the outbox's writer
    SessionOutbox& outbox;
    ~CloseOutbox() { outbox.close(); }
  } close_outbox{*session->outbox};
  auto registered = guarded("register", [&]() -> grpc::Status {
    std::lock_guard<std::mutex> lock(mutex_);
    auto refusal = manager_.register_worker(hello, session);
    return refusal ? to_status(*refusal) : grpc::Status::OK;
  });
  if (!registered.ok()) return registered;
  const grpc::Status served = guarded("worker session", [&] {
    serve_session(hello.worker_id(), stream);
    return grpc::Status::OK;
  });
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string overflowed = session->outbox->overflowed();
  const std::string silence = manager_.silence(hello.worker_id());
  manager_.lost(hello.worker_id(), session.get(),
                !overflowed.empty()      ? overflowed
                : !silence.empty()       ? silence
                : !served.ok()           ? served.error_message()
                : context->IsCancelled() ? "its connection broke (the worker process exited or "
                                           "was killed, or its host went down)"
                                         : "it closed its session");
  return served;
}

void CoordinatorService::serve_session(
    const std::string& worker_id,
    grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::WorkerMessage>* stream) {
  v1::WorkerMessage message;
  while (stream->Read(&message)) {
    const auto arrived = std::chrono::steady_clock::now();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      manager_.on_message(worker_id, message);
    }
    if (message.has_step() && on_step_report_) on_step_report_();
    if (on_message_handled_) {
      const char* kind = message.has_step()     ? "step"
                         : message.has_result() ? "result"
                                                : "heartbeat";
      on_message_handled_(
          kind, std::chrono::duration<double>(std::chrono::steady_clock::now() - arrived).count());
    }
  }
}

grpc::Status CoordinatorService::SubmitJob(grpc::ServerContext* context,
                                           const v1::SubmitJobRequest* request, v1::Job* reply) {
  if (auto status = authorize(*context); !status.ok()) return status;
  DdpJobOptions ddp;
  try {
    ddp = validate_spec(request->spec(), FieldNames::kProto);  // callers know fields, not flags
  } catch (const OptionError& e) {
    std::string message = e.what();
    // The coordinator reads a job's files (--init-from's config.json) where it runs, which need
    // not be where ddpctl or the workers run: say where it looked.
    if (message.find("cannot be read") != std::string::npos) {
      message += "; checked on the coordinator's host, which must see the path as the workers do";
    }
    return {grpc::StatusCode::INVALID_ARGUMENT, message};
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (request->spec().has_ddp()) {
    // Admission by memory: a rank must fit on some worker (admission_budget).
    v1::ListWorkersReply workers;
    manager_.list_workers(&workers);
    std::vector<v1::WorkerHello> hellos;
    for (const auto& w : workers.workers()) hellos.push_back(w.hello());
    const AdmissionBudget budget = admission_budget(ddp.device, hellos);
    try {
      check_fits_in_memory(ddp, request->spec().world_size(), budget.bytes, budget.where);
    } catch (const OptionError& e) {
      return {grpc::StatusCode::RESOURCE_EXHAUSTED, naming_proto_field(e).what()};
    }
  }
  return guarded("submit", [&] {
    auto refusal = manager_.submit(*request, ddp, reply);
    return refusal ? to_status(*refusal) : grpc::Status::OK;
  });
}

grpc::Status CoordinatorService::GetJob(grpc::ServerContext* context,
                                        const v1::GetJobRequest* request, v1::GetJobReply* reply) {
  if (auto status = authorize(*context); !status.ok()) return status;
  std::lock_guard<std::mutex> lock(mutex_);
  const v1::Job* job = manager_.job(request->job_id());
  if (!job) return {grpc::StatusCode::NOT_FOUND, "job_id: no job " + request->job_id()};
  *reply->mutable_job() = *job;
  if (!request->with_steps()) return grpc::Status::OK;
  return guarded("steps", [&] {
    for (auto& s : manager_.steps(request->job_id())) *reply->add_steps() = s;
    return grpc::Status::OK;
  });
}

grpc::Status CoordinatorService::ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest*,
                                          v1::ListJobsReply* reply) {
  if (auto status = authorize(*context); !status.ok()) return status;
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& id : manager_.job_order()) summarize(*manager_.job(id), reply->add_jobs());
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::CancelJob(grpc::ServerContext* context,
                                           const v1::CancelJobRequest* request, v1::Job* reply) {
  if (auto status = authorize(*context); !status.ok()) return status;
  std::lock_guard<std::mutex> lock(mutex_);
  return guarded("cancel", [&] {
    auto refusal = manager_.cancel(request->job_id(), reply);
    return refusal ? to_status(*refusal) : grpc::Status::OK;
  });
}

grpc::Status CoordinatorService::WatchJob(grpc::ServerContext* context,
                                          const v1::WatchJobRequest* request,
                                          grpc::ServerWriter<v1::JobEvent>* writer) {
  if (auto status = authorize(*context); !status.ok()) return status;
  const std::string& id = request->job_id();
  std::unique_lock<std::mutex> lock(mutex_);
  const v1::Job* job = manager_.job(id);
  if (!job) return {grpc::StatusCode::NOT_FOUND, "job_id: no job " + id};
  int& watchers = watchers_[id];
  if (watchers >= options_.max_watchers_per_job) {
    return {grpc::StatusCode::RESOURCE_EXHAUSTED, "max_watchers_per_job: job " + id +
                                                      " already has " + std::to_string(watchers) +
                                                      " watchers"};
  }
  ++watchers;
  struct Unwatch {  // every return below, with mutex_ held
    std::map<std::string, int>& watchers;
    const std::string& id;
    ~Unwatch() {
      if (--watchers[id] == 0) watchers.erase(id);
    }
  } unwatch{watchers_, id};
  const int64_t total = manager_.total_steps(id);
  const std::vector<v1::JobEvent>& events = *manager_.events(id);  // jobs are never removed
  size_t cursor = 0;
  for (;;) {
    while (cursor < events.size()) {
      v1::JobEvent event = events[cursor++];
      event.set_total_steps(total);
      lock.unlock();
      const bool ok = writer->Write(event);
      lock.lock();
      if (!ok) return grpc::Status::OK;  // the watcher went away
    }
    if (is_terminal(job->state()) || manager_.stopping() || context->IsCancelled()) break;
    changed_.wait_for(lock, std::chrono::milliseconds(250));
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::ListWorkers(grpc::ServerContext* context,
                                             const v1::ListWorkersRequest*,
                                             v1::ListWorkersReply* reply) {
  if (auto status = authorize(*context); !status.ok()) return status;
  std::lock_guard<std::mutex> lock(mutex_);
  manager_.list_workers(reply);
  return grpc::Status::OK;
}

StateCounts CoordinatorService::state_counts() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return manager_.state_counts();
}

}  // namespace ddpd::coordinator
