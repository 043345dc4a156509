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

#include "ddpd/api/session_protocol.h"
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
#include "reconnect_backoff.h"
#include "report_log.h"

namespace ddpd {
namespace {

// The port this worker's TCPStore will use whenever it is rank 0, from the range net.h reserves
// for it. The start is spread by the worker's id (and pid), so workers started together probe
// different ports, also in containers that share the host's network but each run as pid 1.
int pick_rendezvous_port(const std::string& host, const std::string& worker_id) {
  const size_t spread = std::hash<std::string>{}(worker_id) + getpid() * 7919UL;
  const int start = static_cast<int>(spread % kRendezvousPortCount);
  for (int i = 0; i < kRendezvousPortCount; ++i) {
    const int port = kRendezvousPortFirst + (start + i) % kRendezvousPortCount;
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

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
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
  explicit Impl(WorkerDaemonOptions o)
      : options(std::move(o)), reports(options.report_buffer_bytes) {}

  WorkerDaemonOptions options;
  std::atomic<bool> stopping{false};
  std::mutex mutex;
  std::condition_variable wake;
  grpc::ClientContext* live_context = nullptr;  // to end the session on stop()
  std::unique_ptr<WorkerMetrics> metrics;
  // Steps and results until the coordinator has stored them; outlives every session.
  ReportLog reports;
  // The running rank's latest progress, for heartbeats: set by the job thread from the rank's
  // events, read by the heartbeat thread, both under progress_mutex.
  std::mutex progress_mutex;
  std::optional<std::pair<std::string, v1::RankProgress>> progress;  // job id, progress

  // The rank this daemon runs, or ran and has not seen its result stored: what its next hello
  // claims. Set and updated by the job thread, forgotten once the result is acknowledged; under
  // claim_mutex. result_seq: the result's sequence number in `reports` (0: not yet sent).
  std::mutex claim_mutex;
  std::optional<v1::RankClaim> claim;
  uint64_t result_seq = 0;
  // When the last session ended (steady, for --orphan-timeout); session thread only.
  std::optional<std::chrono::steady_clock::time_point> session_lost;
  double session_lost_unix = 0;

  // The running rank's process, so that a cancel can stop it: set and cleared by the job
  // thread, stopped by the session thread, both under running_mutex.
  std::mutex running_mutex;
  std::shared_ptr<RankProcess> running_rank;
  bool cancel_before_start = false;  // a cancel that came before the process existed
  // Whether an assignment is under way (from its arrival to its result), and since when the
  // daemon has been idle otherwise: when to start the next rank process ahead.
  bool job_under_way = false;
  std::chrono::steady_clock::time_point idle_since;  // a daemon that just started: long idle
  // The job thread outlives sessions; started and joined by the session thread only.
  std::thread job_thread;
  std::string current_job;                           // the assignment's id; session thread only
  v1::Assignment current_assignment;                 // session thread only
  bool orphan_told = false, orphan_stopped = false;  // this assignment's; session thread only

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

  bool rank_running() {
    std::lock_guard<std::mutex> lock(running_mutex);
    return job_under_way;
  }

  // The coordinator healed the job this worker's rank runs: the rank forms the new group.
  void forward_heal(const v1::HealGroup& heal) {
    spdlog::info("job={} heal: group generation {} at {}:{} (rank {} replaced)", heal.job_id(),
                 heal.generation(), heal.master_addr(), heal.master_port(), heal.lost_rank());
    {
      std::lock_guard<std::mutex> lock(claim_mutex);
      if (claim && claim->job_id() == heal.job_id()) claim->set_generation(heal.generation());
    }
    rank_pipe::Control control;
    *control.mutable_heal() = heal;
    std::lock_guard<std::mutex> lock(running_mutex);
    if (!running_rank || !running_rank->send(control)) {
      spdlog::warn("job={} heal: the rank's process is gone", heal.job_id());
    }
  }

  RankProcessOptions rank_process_options() const {
    RankProcessOptions o;
    o.flags = {"--advertise-host", options.advertise_host,
               "--cuda-device",    std::to_string(options.cuda_device),
               "--worker-id",      options.worker_id};
    // Two progress reports per heartbeat, so every heartbeat carries a fresh one.
    o.progress_seconds = std::max(0.05, options.heartbeat_seconds / 2);
    o.flags.insert(o.flags.end(), options.rank_flags.begin(), options.rank_flags.end());
    return o;
  }

  // Keeps `message` for the coordinator until it is stored (report_log.h).
  uint64_t keep(const std::string& job_id, v1::WorkerMessage message) {
    message.set_job_id(job_id);
    const uint64_t seq = reports.push(std::move(message));
    metrics->record_session(connected.load(), reports.kept_bytes(), reports.dropped());
    return seq;
  }
  std::atomic<bool> connected{false};

  // The rank's events: steps to the coordinator, the metrics and the debug log; progress for
  // the heartbeats. `rank` is the rank's number now: the assignment's, until a shrink in place
  // renumbers it (a second Started event says so).
  void relay(const v1::Assignment& a, int& rank, const rank_pipe::RankEvent& e) {
    if (e.has_started()) {
      rank = e.started().rank();
      {
        std::lock_guard<std::mutex> lock(claim_mutex);
        if (claim) claim->set_rank(rank);
      }
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
      {
        std::lock_guard<std::mutex> lock(claim_mutex);
        if (claim) claim->set_last_step(e.step().step());
      }
      v1::WorkerMessage step;
      *step.mutable_step() = e.step();
      keep(a.job_id(), std::move(step));
    } else if (e.has_progress()) {
      std::lock_guard<std::mutex> lock(progress_mutex);
      progress.emplace(a.job_id(), e.progress());
    } else if (e.has_memory()) {
      MemoryProfile profile;
      profile.after_init = from_pipe(e.memory().after_init());
      profile.before_step = from_pipe(e.memory().before_step());
      profile.after_step = from_pipe(e.memory().after_step());
      profile.step_peak_tensor_bytes = e.memory().step_peak_tensor_bytes();
      profile.step_peak_activation_bytes = e.memory().step_peak_activation_bytes();
      metrics->record_memory(profile, e.memory().final_points());
    } else if (e.has_comm()) {
      metrics->record_comm(from_pipe(e.comm()));
    }
  }

  // Runs one assignment in its own process and keeps its result, whatever ended it.
  void run_job(const v1::Assignment& a) {
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
      result = rank->run([&](const rank_pipe::RankEvent& e) { relay(a, rank_now, e); });
    } catch (const std::exception& e) {
      result.set_job_id(a.job_id());
      result.set_rank(a.rank());
      result.set_attempt(a.attempt());
      result.set_cause(v1::RANK_FAILURE_ERROR);
      result.set_named_rank(a.rank());
      result.set_error(e.what());
    }
    result.set_end_unix_time(unix_now());  // the coordinator may store it after an outage
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
    *done.mutable_result() = result;
    {
      // Under claim_mutex, so that an acknowledgement cannot pass the result unseen.
      std::lock_guard<std::mutex> lock(claim_mutex);
      result_seq = keep(a.job_id(), std::move(done));
      if (claim) claim->set_process_state(v1::RANK_PROCESS_ENDED);
    }
    std::lock_guard<std::mutex> lock(running_mutex);
    running_rank.reset();
    job_under_way = false;
    idle_since = std::chrono::steady_clock::now();
  }

  void start_job(const v1::Assignment& a) {
    if (job_thread.joinable()) job_thread.join();  // the previous job has kept its result
    current_job = a.job_id();
    current_assignment = a;
    orphan_told = orphan_stopped = false;
    {
      std::lock_guard<std::mutex> lock(claim_mutex);
      claim.emplace();
      claim->set_job_id(a.job_id());
      claim->set_attempt(a.attempt());
      claim->set_generation(a.join_generation());
      claim->set_rank(a.rank());
      claim->set_last_step(-1);
      claim->set_process_state(v1::RANK_PROCESS_RUNNING);
      result_seq = 0;
    }
    {
      std::lock_guard<std::mutex> lock(running_mutex);
      cancel_before_start = false;
      job_under_way = true;
    }
    job_thread = std::thread([this, a] { run_job(a); });
  }

  // The coordinator stored every message up to `seq`; a stored result ends the claim.
  void acknowledged(uint64_t seq) {
    reports.acknowledge(seq);
    {
      std::lock_guard<std::mutex> lock(claim_mutex);
      if (claim && result_seq > 0 && result_seq <= seq) claim.reset();
    }
    metrics->record_session(connected.load(), reports.kept_bytes(), reports.dropped());
  }

  v1::WorkerHello hello_for_session(const v1::WorkerHello& base) {
    v1::WorkerHello hello = base;
    std::lock_guard<std::mutex> lock(claim_mutex);
    if (claim) {
      *hello.mutable_claim() = *claim;
      hello.mutable_claim()->set_session_lost_unix_time(session_lost_unix);
    }
    return hello;
  }

  void handle(const v1::CoordinatorMessage& message, const v1::WorkerHello& hello) {
    if (message.has_welcome()) {
      spdlog::info("registered with {} as {}", options.coordinator, hello.worker_id());
      connected = true;
      session_lost.reset();
      metrics->record_session(true, reports.kept_bytes(), reports.dropped());
    } else if (message.has_assign()) {
      start_job(message.assign());
    } else if (message.has_heal() && message.heal().job_id() == current_job) {
      forward_heal(message.heal());
    } else if (message.has_acknowledged()) {
      acknowledged(message.acknowledged());
    } else if (message.cancel_job_id() == current_job && !current_job.empty()) {
      spdlog::info("job={} cancel requested", current_job);
      stop_running_job();
    }
  }

  // The session's heartbeats, each with the running rank's latest progress; returns when the
  // session is over.
  void send_heartbeats(SessionWriter& writer, const std::atomic<bool>& session_over) {
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
      lock.lock();
    }
  }

  enum class SessionEnd { kRetry, kWelcomedThenRetry, kRefused };

  // One registration and the session that follows; the rank, if any, outlives it.
  SessionEnd session(v1::Coordinator::Stub& stub, const v1::WorkerHello& base) {
    grpc::ClientContext context;
    if (!options.token.empty()) context.AddMetadata("authorization", "Bearer " + options.token);
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (stopping) return SessionEnd::kRetry;
      live_context = &context;
    }
    const v1::WorkerHello hello = hello_for_session(base);
    auto stream = stub.WorkerSession(&context);
    SessionWriter writer(stream.get());
    v1::WorkerMessage first;
    *first.mutable_hello() = hello;
    writer.write(first);
    reports.rewind();  // what no session has seen stored goes first

    std::atomic<bool> session_over{false};
    std::thread sender([&] {
      while (!session_over) {
        auto next = reports.next_to_send(std::chrono::seconds(1));
        if (next && !writer.write(*next)) break;
      }
    });
    std::thread heartbeat([&] { send_heartbeats(writer, session_over); });
    bool welcomed = false;
    v1::CoordinatorMessage message;
    while (stream->Read(&message)) {
      welcomed |= message.has_welcome();
      handle(message, hello);
    }
    {
      std::lock_guard<std::mutex> lock(mutex);
      session_over = true;
      live_context = nullptr;
    }
    reports.interrupt();
    wake.notify_all();
    heartbeat.join();
    sender.join();
    connected = false;
    metrics->record_session(false, reports.kept_bytes(), reports.dropped());
    if (welcomed || !session_lost) {
      session_lost = std::chrono::steady_clock::now();
      session_lost_unix = unix_now();
    }
    const grpc::Status status = stream->Finish();
    if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
        status.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
        status.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
      spdlog::error("coordinator refused worker {}: {}", hello.worker_id(), status.error_message());
      return SessionEnd::kRefused;
    }
    if (!stopping && welcomed) {
      spdlog::warn("session ended ({}){}; registering again", status.error_message(),
                   rank_running() ? ", the rank trains on" : "");
    } else if (!stopping) {
      spdlog::debug("registration failed ({}); trying again", status.error_message());
    }
    return welcomed ? SessionEnd::kWelcomedThenRetry : SessionEnd::kRetry;
  }

  // The daemon's own thread for starting rank processes ahead. Not a session's: a rank process
  // dies with the thread that started it (PR_SET_PDEATHSIG, rank_main.cpp), and ranks outlive
  // sessions.
  void prestart_loop() {
    std::unique_lock<std::mutex> lock(mutex);
    while (!stopping) {
      wake.wait_for(lock, std::chrono::duration<double>(options.heartbeat_seconds));
      if (stopping) break;
      lock.unlock();
      start_rank_process_ahead();
      lock.lock();
    }
  }

  // A rank with no coordinator for --orphan-timeout: one whose job checkpoints is told to stop
  // after its next checkpoint (its peers are as orphaned, and all write that one), and stopped
  // outright if it still runs at twice the timeout; any other rank is stopped at once.
  void stop_orphan() {
    if (!session_lost || !rank_running()) return;
    const double alone =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - *session_lost).count();
    const double limit = options.orphan_timeout_seconds;
    if (alone < limit || orphan_stopped) return;
    const bool checkpoints = current_assignment.spec().has_ddp() && [&] {
      const DdpJobOptions job = from_proto(current_assignment.spec().ddp());
      return !job.checkpoint_dir.empty() && job.checkpoint_every > 0;
    }();
    if (checkpoints && !orphan_told) {
      spdlog::error(
          "job={} no coordinator for {:.0f} s (--orphan-timeout {:.0f} s): the rank "
          "stops after its next checkpoint",
          current_job, alone, limit);
      rank_pipe::Control control;
      control.set_stop_after_checkpoint(true);
      std::lock_guard<std::mutex> lock(running_mutex);
      if (running_rank) running_rank->send(control);
      orphan_told = true;
      return;
    }
    if (checkpoints && alone < 2 * limit) return;  // its checkpoint may still come
    spdlog::error(
        "job={} no coordinator for {:.0f} s (--orphan-timeout {:.0f} s): stopping the "
        "rank",
        current_job, alone, limit);
    stop_running_job();
    orphan_stopped = true;
  }

  // Registers, and again with backoff whenever a session ends, until stop(); 1 when refused.
  int serve(grpc::Channel& channel, v1::Coordinator::Stub& stub, const v1::WorkerHello& hello) {
    std::mt19937 random(std::random_device{}());
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    int tries = 0;  // since the last welcomed session
    while (!stopping) {
      const SessionEnd end = session(stub, hello);
      // Still connected: the coordinator itself ended the session (or refused it for now), and
      // the backoff is owed in full; else the connection is what failed.
      const bool connected_still = channel.GetState(false) == GRPC_CHANNEL_READY;
      if (end == SessionEnd::kRefused) return 1;
      if (end == SessionEnd::kWelcomedThenRetry) tries = 0;
      stop_orphan();
      const double delay = reconnect_delay_seconds(
          tries++, uniform(random), options.reconnect_first_seconds, options.reconnect_max_seconds);
      wait_to_register(channel, delay, /*until_ready=*/!connected_still);
    }
    return 0;
  }

  // Waits `delay` before the next registration, or, `until_ready`, less: the channel keeps
  // connecting on its own (its reconnect backoff is capped at 1 s, service/channel.cpp), and a
  // coordinator that accepts a connection again is registered with at once, not at the end of a
  // long backoff. Measured: a 5 s outage's adoption came 7.5-8.6 s after the coordinator's start
  // without it.
  // The waits are on the channel, not asleep: gRPC reads a connection attempt's replies only
  // while something polls the channel, and asleep nothing did but its backup poller (every 5 s),
  // so a TLS handshake (several round trips) missed its 2 s connect deadline again and again: a
  // worker started 1.5 s before a TLS coordinator registered 75-91 s later. 100 ms a wait keeps
  // stop() as prompt as before.
  void wait_to_register(grpc::Channel& channel, double delay, bool until_ready) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(delay);
    while (!stopping && std::chrono::steady_clock::now() < deadline) {
      const grpc_connectivity_state state = channel.GetState(/*try_to_connect=*/true);
      if (state == GRPC_CHANNEL_READY && until_ready) return;
      channel.WaitForStateChange(state,
                                 std::chrono::system_clock::now() + std::chrono::milliseconds(100));
    }
  }
};

WorkerDaemon::WorkerDaemon(WorkerDaemonOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {
  impl_->metrics = std::make_unique<WorkerMetrics>(impl_->options.metrics);
  if (impl_->metrics->port() > 0) {
    spdlog::info("serving /metrics on {}:{}", impl_->options.metrics.bind_host,
                 impl_->metrics->port());
  }
}

WorkerDaemon::~WorkerDaemon() {
  impl_->stop_running_job();
  if (impl_->job_thread.joinable()) impl_->job_thread.join();
}

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
  hello.set_protocol_version(kSessionProtocolVersion);
  auto channel = coordinator_channel(o.coordinator, o.tls_ca);
  auto stub = v1::Coordinator::NewStub(channel);
  std::thread prestarter([this] { impl_->prestart_loop(); });
  const int code = impl_->serve(*channel, *stub, hello);
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stopping = true;  // refused: the prestarter ends too
  }
  impl_->wake.notify_all();
  prestarter.join();
  // Stopped (or refused): the daemon's rank goes with it.
  impl_->stop_running_job();
  if (impl_->job_thread.joinable()) impl_->job_thread.join();
  return code;
}

}  // namespace ddpd
