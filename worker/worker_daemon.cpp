#include "worker_daemon.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <optional>
#include <random>
#include <thread>

#include "ddpd/api/spec_convert.h"
#include "ddpd/api/step_report.h"
#include "ddpd/common/comm_options.h"
#include "ddpd/common/net.h"
#include "ddpd/common/training_result.h"
#include "ddpd/core/local_run.h"
#include "ddpd/core/rendezvous.h"
#include "ddpd/service/channel.h"
#include "ddpd/v1/ddpd.grpc.pb.h"
#include "rank_process.h"

namespace ddpd {
namespace {

// The port this worker's TCPStore will use whenever it is rank 0. It stays reserved only by
// convention between jobs, so it is taken below Linux's default ephemeral range (32768–60999):
// outgoing connections (gRPC, Gloo) are never given it meanwhile. The start is spread by the
// worker's id (and pid), so workers started together probe different ports, also in containers
// that share the host's network but each run as pid 1.
int pick_rendezvous_port(const std::string& host, const std::string& worker_id) {
  constexpr int kFirst = 20000, kCount = 12000;
  const size_t spread = std::hash<std::string>{}(worker_id) + getpid() * 7919UL;
  const int start = static_cast<int>(spread % kCount);
  for (int i = 0; i < kCount; ++i) {
    const int port = kFirst + (start + i) % kCount;
    if (can_bind(host, port)) return port;
  }
  throw std::runtime_error("--rendezvous-port: no free port in 20000-31999 on " + host);
}

MemoryBytes from_pipe(const rank_pipe::Memory& m) {
  return {m.param_bytes(), m.grad_bytes(), m.optimizer_state_bytes(), m.peak_bytes()};
}

CommBenchResult from_pipe(const rank_pipe::CommRows& rows) {
  CommBenchResult bench;
  bench.world_size = rows.world_size();
  for (const auto& r : rows.rows()) {
    CommRow row;
    row.collective = parse_enum<CommSeries>(r.collective());
    row.size_bytes = r.size_bytes();
    row.time_s = r.time_s();
    row.algbw_bytes_per_s = r.algbw_bytes_per_s();
    row.busbw_bytes_per_s = r.busbw_bytes_per_s();
    bench.rows.push_back(row);
  }
  return bench;
}

using Stream = grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>;

// One session's writer: the heartbeat and job threads share the stream.
class SessionWriter {
 public:
  explicit SessionWriter(Stream* stream) : stream_(stream) {}
  bool write(const v1::WorkerMessage& message) {
    std::lock_guard<std::mutex> lock(mutex_);
    return stream_->Write(message);
  }

 private:
  std::mutex mutex_;
  Stream* stream_;
};

}  // namespace

struct WorkerDaemon::Impl {
  WorkerDaemonOptions options;
  std::atomic<bool> stopping{false};
  std::mutex mutex;
  std::condition_variable wake;
  grpc::ClientContext* live_context = nullptr;  // to end the session on stop()
  std::unique_ptr<WorkerMetrics> metrics;
  // The running rank's latest progress, for heartbeats: set by the job thread from the rank's
  // events, read by the heartbeat thread, both under progress_mutex.
  std::mutex progress_mutex;
  std::optional<std::pair<std::string, v1::RankProgress>> progress;  // job id, progress

  // The running rank's process, so that a cancel can stop it: set and cleared by the job
  // thread, stopped by the session thread, both under running_mutex.
  std::mutex running_mutex;
  std::shared_ptr<RankProcess> running_rank;
  bool cancel_before_start = false;  // a cancel that came before the process existed
  // Whether an assignment is under way (from its arrival to its result), and since when the
  // daemon has been idle otherwise: when to start the next rank process ahead.
  bool job_under_way = false;
  std::chrono::steady_clock::time_point idle_since;  // a daemon that just started: long idle

  // The next assignment's rank process, started ahead: taken by the job thread, started by the
  // heartbeat thread once the daemon has been idle for options.prestart_idle_seconds.
  std::mutex started_mutex;
  std::unique_ptr<StartedRankProcess> started_rank;

  std::unique_ptr<StartedRankProcess> take_started_rank() {
    std::lock_guard<std::mutex> lock(started_mutex);
    return std::move(started_rank);
  }

  // The heartbeat thread's: starts the next rank process when the daemon has been idle long
  // enough and has none waiting.
  void start_rank_process_ahead() {
    if (!options.prestart_rank) return;
    {
      std::lock_guard<std::mutex> lock(running_mutex);
      const std::chrono::duration<double> idle = std::chrono::steady_clock::now() - idle_since;
      if (job_under_way || idle.count() < options.prestart_idle_seconds) return;
    }
    std::lock_guard<std::mutex> lock(started_mutex);
    if (started_rank && started_rank->waiting()) return;
    try {
      started_rank = std::make_unique<StartedRankProcess>(rank_process_options());
      spdlog::debug("the next rank process waits as process {}", started_rank->pid());
    } catch (const std::exception& e) {
      started_rank.reset();
      spdlog::warn("cannot start the next rank process ahead: {}", e.what());
    }
  }

  void stop_running_job() {
    std::lock_guard<std::mutex> lock(running_mutex);
    cancel_before_start = true;
    if (running_rank) running_rank->stop();
  }

  // The coordinator healed the job this worker's rank runs: the rank forms the new group.
  void forward_heal(const v1::HealGroup& heal) {
    spdlog::info("job={} heal: group generation {} at {}:{} (rank {} replaced)", heal.job_id(),
                 heal.generation(), heal.master_addr(), heal.master_port(), heal.lost_rank());
    rank_pipe::Control control;
    *control.mutable_heal() = heal;
    std::lock_guard<std::mutex> lock(running_mutex);
    if (!running_rank || !running_rank->send(control)) {
      spdlog::warn("job={} heal: the rank's process is gone", heal.job_id());
    }
  }

  RankProcessOptions rank_process_options() const {
    RankProcessOptions o;
    o.flags = {"--advertise-host", options.advertise_host, "--cuda-device",
               std::to_string(options.cuda_device)};
    // Two progress reports per heartbeat, so every heartbeat carries a fresh one.
    o.progress_seconds = std::max(0.05, options.heartbeat_seconds / 2);
    o.flags.insert(o.flags.end(), options.rank_flags.begin(), options.rank_flags.end());
    return o;
  }

  // The rank's events: steps to the coordinator, the metrics and the debug log; progress for
  // the heartbeats. `rank` is the rank's number now: the assignment's, until a shrink in place
  // renumbers it (a second Started event says so).
  void relay(const v1::Assignment& a, int& rank, const rank_pipe::RankEvent& e,
             SessionWriter& writer) {
    if (e.has_started()) {
      rank = e.started().rank();
      if (a.spec().has_comm()) {
        metrics->comm_job_started(a.job_id(), e.started().rank(), e.started().transport());
      } else {
        metrics->ddp_job_started(a.job_id(), e.started().rank(),
                                 enum_name(from_proto(a.spec().ddp()).strategy),
                                 e.started().transport());
      }
    } else if (e.has_step()) {
      const StepMetrics m = from_report(e.step());
      metrics->record_step(m);
      spdlog::debug("job={} rank={} step={} loss={:.4f} step_ms={:.2f} comm_fraction={:.3f}",
                    a.job_id(), rank, m.step, m.loss, m.step_seconds * 1e3, m.comm_fraction);
      v1::WorkerMessage step;
      step.set_job_id(a.job_id());
      *step.mutable_step() = e.step();
      writer.write(step);
    } else if (e.has_progress()) {
      std::lock_guard<std::mutex> lock(progress_mutex);
      progress.emplace(a.job_id(), e.progress());
    } else if (e.has_memory()) {
      MemoryProfile profile;
      profile.after_init = from_pipe(e.memory().after_init());
      profile.before_step = from_pipe(e.memory().before_step());
      profile.after_step = from_pipe(e.memory().after_step());
      metrics->record_memory(profile, e.memory().final_points());
    } else if (e.has_comm()) {
      metrics->record_comm(from_pipe(e.comm()));
    }
  }

  // Runs one assignment in its own process and reports its result, whatever ended it.
  void run_job(const v1::Assignment& a, SessionWriter& writer) {
    v1::JobResult result;
    try {
      auto rank = std::make_shared<RankProcess>(rank_process_options(), a, take_started_rank());
      {
        std::lock_guard<std::mutex> lock(running_mutex);
        if (cancel_before_start) rank->stop();
        running_rank = rank;
      }
      spdlog::info("job={} rank={} runs in process {}", a.job_id(), a.rank(), rank->pid());
      int rank_now = a.rank();
      result = rank->run([&](const rank_pipe::RankEvent& e) { relay(a, rank_now, e, writer); });
    } catch (const std::exception& e) {
      result.set_job_id(a.job_id());
      result.set_rank(a.rank());
      result.set_attempt(a.attempt());
      result.set_cause(v1::RANK_FAILURE_ERROR);
      result.set_named_rank(a.rank());
      result.set_error(e.what());
    }
    {
      std::lock_guard<std::mutex> lock(running_mutex);
      running_rank.reset();
      job_under_way = false;
      idle_since = std::chrono::steady_clock::now();
    }
    {
      std::lock_guard<std::mutex> lock(progress_mutex);
      progress.reset();
    }
    if (!result.succeeded()) {
      // The rank as the job ended (a shrink in place renumbers it).
      spdlog::warn("job={} rank={} failed: {}", a.job_id(), result.rank(), result.error());
    }
    metrics->job_finished(result.succeeded());
    v1::WorkerMessage done;
    done.set_job_id(a.job_id());
    *done.mutable_result() = result;
    writer.write(done);
  }

  // One registration; returns false when the coordinator refused us for good.
  bool session(v1::Coordinator::Stub& stub, const v1::WorkerHello& hello) {
    grpc::ClientContext context;
    if (!options.token.empty()) context.AddMetadata("authorization", "Bearer " + options.token);
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (stopping) return true;
      live_context = &context;
    }
    auto stream = stub.WorkerSession(&context);
    SessionWriter writer(stream.get());
    v1::WorkerMessage first;
    *first.mutable_hello() = hello;
    writer.write(first);

    std::atomic<bool> session_over{false};
    std::string current_job;
    std::thread job_thread;
    std::thread heartbeat([&] {
      std::unique_lock<std::mutex> lock(mutex);
      while (!session_over && !stopping) {
        wake.wait_for(lock, std::chrono::duration<double>(options.heartbeat_seconds));
        if (session_over || stopping) break;
        lock.unlock();
        v1::WorkerMessage beat;
        beat.set_heartbeat(true);
        {
          std::lock_guard<std::mutex> progress_lock(progress_mutex);
          if (progress) {
            beat.set_job_id(progress->first);
            *beat.mutable_progress() = progress->second;
          }
        }
        writer.write(beat);
        start_rank_process_ahead();
        lock.lock();
      }
    });

    v1::CoordinatorMessage message;
    while (stream->Read(&message)) {
      if (message.has_welcome()) {
        spdlog::info("registered with {} as {}", options.coordinator, hello.worker_id());
      } else if (message.has_assign()) {
        if (job_thread.joinable()) job_thread.join();  // the previous job reported already
        current_job = message.assign().job_id();
        {
          std::lock_guard<std::mutex> lock(running_mutex);
          cancel_before_start = false;
          job_under_way = true;
        }
        job_thread = std::thread(
            [this, assignment = message.assign(), &writer] { run_job(assignment, writer); });
      } else if (message.has_heal() && message.heal().job_id() == current_job) {
        forward_heal(message.heal());
      } else if (message.cancel_job_id() == current_job && !current_job.empty()) {
        spdlog::info("job={} cancel requested", current_job);
        stop_running_job();
      }
    }
    stop_running_job();
    {
      std::lock_guard<std::mutex> lock(mutex);
      session_over = true;
      live_context = nullptr;
    }
    wake.notify_all();
    heartbeat.join();
    if (job_thread.joinable()) job_thread.join();
    const grpc::Status status = stream->Finish();
    if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
        status.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
        status.error_code() == grpc::StatusCode::ALREADY_EXISTS) {
      spdlog::error("coordinator refused worker {}: {}", hello.worker_id(), status.error_message());
      return false;
    }
    if (!stopping) spdlog::warn("session ended ({}); registering again", status.error_message());
    return true;
  }
};

WorkerDaemon::WorkerDaemon(WorkerDaemonOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->metrics = std::make_unique<WorkerMetrics>(impl_->options.metrics);
  if (impl_->metrics->port() > 0) {
    spdlog::info("serving /metrics on {}:{}", impl_->options.metrics.bind_host,
                 impl_->metrics->port());
  }
}

WorkerDaemon::~WorkerDaemon() = default;

void WorkerDaemon::stop() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->stopping = true;
  if (impl_->live_context) impl_->live_context->TryCancel();
  impl_->wake.notify_all();
}

int WorkerDaemon::run() {
  auto& o = impl_->options;
  if (o.worker_id.empty()) {
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    // Host and pid, plus a random tag: containers on the host's network share its hostname and
    // each run as pid 1, and the coordinator refuses a second worker with the same id.
    char tag[8];
    std::snprintf(tag, sizeof(tag), "%04x", std::random_device{}() & 0xffff);
    o.worker_id = std::string(host) + "-" + std::to_string(getpid()) + "-" + tag;
  }
  v1::WorkerHello hello;
  hello.set_worker_id(o.worker_id);
  hello.set_advertised_host(o.advertise_host);
  hello.set_rendezvous_port(o.rendezvous_port > 0
                                ? o.rendezvous_port
                                : pick_rendezvous_port(o.advertise_host, o.worker_id));
  hello.set_cpu_count(static_cast<int>(std::thread::hardware_concurrency()));
  hello.set_gpu_count(visible_cuda_devices());
  hello.set_memory_bytes(o.memory_bytes);
  hello.set_metrics_port(impl_->metrics->port());
  hello.add_backends("gloo");
  if (visible_cuda_devices() > o.cuda_device) hello.add_backends("nccl");
  hello.set_gpu_memory_bytes(cuda_device_memory_bytes(o.cuda_device));
  auto channel = coordinator_channel(o.coordinator, o.tls_ca);
  auto stub = v1::Coordinator::NewStub(channel);
  while (!impl_->stopping) {
    if (!impl_->session(*stub, hello)) return 1;
    std::unique_lock<std::mutex> lock(impl_->mutex);
    impl_->wake.wait_for(lock, std::chrono::duration<double>(o.reconnect_seconds),
                         [&] { return impl_->stopping.load(); });
  }
  return 0;
}

}  // namespace ddpd
