#include "simulated_workers.h"

#include "ddpd/api/session_protocol.h"

#include <cmath>

namespace ddpd::load {

struct SimulatedWorkers::Session {
  std::string worker_id;
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>> stream;
  std::mutex mutex;  // the stream's writes and the assignment below
  bool welcomed = false;
  std::string job_id;  // current assignment ("" : idle)
  int rank = 0;
  int attempt = 0;
  int64_t next_step = 0;
  std::chrono::steady_clock::time_point next_heartbeat;
  std::chrono::steady_clock::time_point next_report;
};

SimulatedWorkers::SimulatedWorkers(const SimulatedWorkersOptions& options) : options_(options) {
  // Separate HTTP/2 connections, as separate daemons would have (a local subchannel pool keeps
  // channels with equal arguments from sharing one).
  const int channels = (options.workers + options.sessions_per_channel - 1) /
                       std::max(1, options.sessions_per_channel);
  for (int c = 0; c < std::max(1, channels); ++c) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    channels_.push_back(
        grpc::CreateCustomChannel(options.coordinator, grpc::InsecureChannelCredentials(), args));
  }
  const auto now = std::chrono::steady_clock::now();
  for (int i = 0; i < options.workers; ++i) {
    auto session = std::make_unique<Session>();
    session->worker_id = "loadgen-" + std::to_string(i);
    if (!options.token.empty()) {
      session->context.AddMetadata("authorization", "Bearer " + options.token);
    }
    auto stub = v1::Coordinator::NewStub(channels_[i % channels_.size()]);
    session->stream = stub->WorkerSession(&session->context);
    v1::WorkerMessage hello;
    hello.mutable_hello()->set_worker_id(session->worker_id);
    hello.mutable_hello()->set_advertised_host("127.0.0.1");
    hello.mutable_hello()->set_rendezvous_port(20000 + i % 40000);
    hello.mutable_hello()->set_protocol_version(kSessionProtocolVersion);
    hello.mutable_hello()->set_cpu_count(1);
    hello.mutable_hello()->add_backends("gloo");
    session->stream->Write(hello);
    // Spread the heartbeats over one interval, as daemons started at different times would.
    session->next_heartbeat =
        now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                  std::chrono::duration<double>(options.heartbeat_seconds * i / options.workers));
    sessions_.push_back(std::move(session));
  }
  for (auto& session : sessions_) {
    threads_.emplace_back([this, s = session.get()] { read_loop(*s); });
  }
  const size_t writers = static_cast<size_t>(std::max(1, options.writer_threads));
  for (size_t w = 0; w < writers; ++w) {
    threads_.emplace_back([this, w, writers] { write_loop(w, writers); });
  }
}

SimulatedWorkers::~SimulatedWorkers() {
  stopping_.store(true);
  for (auto& session : sessions_) {
    std::lock_guard<std::mutex> lock(session->mutex);
    session->stream->WritesDone();
    session->context.TryCancel();
  }
  for (auto& t : threads_) t.join();
}

int SimulatedWorkers::assigned(const std::string& job_id) const {
  int count = 0;
  for (const auto& session : sessions_) {
    std::lock_guard<std::mutex> lock(session->mutex);
    count += job_id.empty() ? !session->job_id.empty() : session->job_id == job_id;
  }
  return count;
}

int SimulatedWorkers::finish_jobs() {
  int finished = 0;
  for (auto& session : sessions_) {
    std::lock_guard<std::mutex> lock(session->mutex);
    if (session->job_id.empty()) continue;
    v1::WorkerMessage done;
    done.set_job_id(session->job_id);
    auto* result = done.mutable_result();
    result->set_job_id(session->job_id);
    result->set_rank(session->rank);
    result->set_succeeded(true);
    result->set_attempt(session->attempt);
    result->set_result_json(R"({"state":"SUCCEEDED","simulated":true})");
    session->stream->Write(done);
    session->job_id.clear();
    ++finished;
  }
  return finished;
}

void SimulatedWorkers::read_loop(Session& session) {
  v1::CoordinatorMessage message;
  while (session.stream->Read(&message)) {
    std::lock_guard<std::mutex> lock(session.mutex);
    if (message.has_welcome()) {
      session.welcomed = true;
      welcomed_.fetch_add(1);
    } else if (message.has_assign()) {
      const auto& a = message.assign();
      session.job_id = a.job_id();
      session.rank = a.rank();
      session.attempt = a.attempt();
      session.next_step = 0;
      session.next_report = std::chrono::steady_clock::now();
      if (a.spec().has_ddp() && a.spec().ddp().steps() == 1) {
        // A history job: done at once.
        v1::WorkerMessage done;
        done.set_job_id(a.job_id());
        done.mutable_result()->set_job_id(a.job_id());
        done.mutable_result()->set_rank(a.rank());
        done.mutable_result()->set_succeeded(true);
        done.mutable_result()->set_attempt(a.attempt());
        done.mutable_result()->set_result_json(R"({"state":"SUCCEEDED","simulated":true})");
        session.stream->Write(done);
        session.job_id.clear();
      }
    } else if (!message.cancel_job_id().empty() && message.cancel_job_id() == session.job_id) {
      session.job_id.clear();
    }
  }
}

void SimulatedWorkers::write_loop(size_t first, size_t stride) {
  using clock = std::chrono::steady_clock;
  const auto heartbeat = std::chrono::duration_cast<clock::duration>(
      std::chrono::duration<double>(options_.heartbeat_seconds));
  const auto report_every = std::chrono::duration_cast<clock::duration>(
      std::chrono::duration<double>(1.0 / std::max(1e-3, options_.step_reports_per_second)));
  while (!stopping_.load()) {
    const auto now = clock::now();
    auto next_wake = now + std::chrono::milliseconds(20);
    for (size_t i = first; i < sessions_.size(); i += stride) {
      Session& s = *sessions_[i];
      std::lock_guard<std::mutex> lock(s.mutex);
      if (!s.welcomed) continue;
      if (now >= s.next_heartbeat) {
        v1::WorkerMessage beat;
        beat.set_heartbeat(true);
        if (!s.job_id.empty()) {
          beat.set_job_id(s.job_id);
          auto* p = beat.mutable_progress();
          p->set_phase("forward");
          p->set_step(s.next_step);
          p->set_last_enqueued(3 * s.next_step);
          p->set_last_completed(3 * s.next_step);
        }
        s.stream->Write(beat);
        heartbeats_sent_.fetch_add(1);
        s.next_heartbeat += heartbeat;
      }
      if (!s.job_id.empty() && !steps_paused_.load() && now >= s.next_report) {
        v1::WorkerMessage report;
        report.set_job_id(s.job_id);
        auto* step = report.mutable_step();
        step->set_rank(s.rank);
        step->set_step(s.next_step++);
        step->set_attempt(s.attempt);
        step->set_loss(9.2 - 0.001 * static_cast<double>(s.next_step));
        step->set_step_seconds(0.1);
        step->set_forward_seconds(0.03);
        step->set_backward_seconds(0.05);
        step->set_optimizer_seconds(0.01);
        step->set_comm_seconds(0.02);
        step->set_exposed_comm_seconds(0.01);
        step->set_comm_fraction(0.1);
        step->set_tokens_per_second(10000);
        step->set_lr(1e-3);
        s.stream->Write(report);
        step_reports_sent_.fetch_add(1);
        s.next_report += report_every;
        if (s.next_report < now) s.next_report = now + report_every;  // fell behind: no burst
      }
      next_wake =
          std::min({next_wake, s.next_heartbeat, s.job_id.empty() ? next_wake : s.next_report});
    }
    std::this_thread::sleep_until(std::max(next_wake, clock::now() + std::chrono::milliseconds(1)));
  }
}

}  // namespace ddpd::load
