#include "worker_daemon.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <random>
#include <thread>

#include "ddpd/comm_bench.h"
#include "ddpd/communicator.h"
#include "ddpd/local_run.h"
#include "ddpd/net.h"
#include "ddpd/rendezvous.h"
#include "ddpd/result_json.h"
#include "ddpd/service/channel.h"
#include "ddpd/spec_convert.h"
#include "ddpd/trainer.h"
#include "ddpd/v1/ddpd.grpc.pb.h"

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

v1::StepReport to_report(const StepMetrics& m, int rank) {
  v1::StepReport r;
  r.set_rank(rank);
  r.set_step(m.step);
  r.set_loss(m.loss);
  r.set_step_seconds(m.step_seconds);
  r.set_forward_seconds(m.forward_seconds);
  r.set_backward_seconds(m.backward_seconds);
  r.set_optimizer_seconds(m.optimizer_seconds);
  r.set_checkpoint_seconds(m.checkpoint_seconds);
  r.set_comm_seconds(m.comm_seconds);
  r.set_exposed_comm_seconds(m.exposed_comm_seconds);
  r.set_comm_fraction(m.comm_fraction);
  r.set_tokens_per_second(m.tokens_per_second);
  if (m.param_spread) r.set_param_spread(*m.param_spread);
  r.set_lr(m.lr);
  if (m.grad_norm) r.set_grad_norm(*m.grad_norm);
  if (m.eval_loss) r.set_eval_loss(*m.eval_loss);
  for (const auto& span : m.spans) {
    auto* out = r.add_spans();
    out->set_name(span.name);
    out->set_communication(span.communication);
    out->set_begin_unix_s(span.begin_unix_s);
    out->set_end_unix_s(span.end_unix_s);
  }
  return r;
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
  // While a DDP job trains: fills a heartbeat with the rank's progress. Set and cleared by the
  // job thread, called by the heartbeat thread, both under progress_mutex (so the trainer it
  // reads outlives every call).
  std::mutex progress_mutex;
  std::function<void(v1::WorkerMessage&)> describe_progress;

  // Sets describe_progress for one job's lifetime (cleared on every exit path).
  class ProgressSource {
   public:
    ProgressSource(Impl& impl, std::function<void(v1::WorkerMessage&)> describe) : impl_(impl) {
      std::lock_guard<std::mutex> lock(impl_.progress_mutex);
      impl_.describe_progress = std::move(describe);
    }
    ~ProgressSource() {
      std::lock_guard<std::mutex> lock(impl_.progress_mutex);
      impl_.describe_progress = nullptr;
    }

   private:
    Impl& impl_;
  };

  // The running job's communicator, so that a cancel can abort it: a rank blocked in a
  // collective whose peer is gone (stopped, cut off) otherwise holds this worker until
  // --timeout. Set and cleared by the job thread, aborted by the session thread, both under
  // running_mutex.
  std::mutex running_mutex;
  std::shared_ptr<Communicator> running_comm;

  class RunningComm {
   public:
    RunningComm(Impl& impl, std::shared_ptr<Communicator> comm, const std::atomic<bool>& cancelled)
        : impl_(impl) {
      std::lock_guard<std::mutex> lock(impl_.running_mutex);
      if (cancelled) comm->abort();  // cancelled while it met its peers
      impl_.running_comm = std::move(comm);
    }
    ~RunningComm() {
      std::lock_guard<std::mutex> lock(impl_.running_mutex);
      impl_.running_comm.reset();
    }

   private:
    Impl& impl_;
  };

  void abort_running_job() {
    std::lock_guard<std::mutex> lock(running_mutex);
    if (running_comm) running_comm->abort();
  }

  RendezvousOptions rendezvous_for(const v1::Assignment& a, double timeout_s) const {
    RendezvousOptions rendezvous;
    rendezvous.master_addr = a.master_addr();
    rendezvous.master_port = a.master_port();
    rendezvous.rank = a.rank();
    rendezvous.world_size = a.world_size();
    rendezvous.local_rank = options.cuda_device;  // NCCL jobs run on this daemon's GPU
    rendezvous.local_address = options.advertise_host;
    rendezvous.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    return rendezvous;
  }

  static void log_transport(const v1::Assignment& a, const Communicator& comm) {
    if (!comm.transport_note().empty()) {
      spdlog::warn("job={} rank={} {}", a.job_id(), a.rank(), comm.transport_note());
    } else {
      spdlog::info("job={} rank={} transport {}", a.job_id(), a.rank(), comm.transport());
    }
  }

  // Runs a comm benchmark; returns rank 0's result JSON (other ranks: empty).
  std::string run_comm_job(const v1::Assignment& a, const std::atomic<bool>& cancelled) {
    const CommJob job = from_proto(a.spec().comm());
    RendezvousOptions rendezvous = rendezvous_for(a, job.collective_timeout_s);
    rendezvous.backend = job.backend;
    rendezvous.transport = job.transport;
    auto comm = connect(rendezvous);
    RunningComm running(*this, comm, cancelled);
    log_transport(a, *comm);
    metrics->comm_job_started(a.job_id(), a.rank(), comm->transport());
    const CommBenchResult bench = run_comm_benchmark(job.bench, *comm);
    metrics->record_comm(bench);
    return a.rank() == 0 ? to_json(bench).dump() : "";
  }

  void run_job(const v1::Assignment& a, SessionWriter& writer, std::atomic<bool>& cancelled) {
    v1::WorkerMessage done;
    done.set_job_id(a.job_id());
    auto* result = done.mutable_result();
    result->set_job_id(a.job_id());
    result->set_rank(a.rank());
    result->set_attempt(a.attempt());
    try {
      if (a.spec().has_comm()) {
        result->set_result_json(run_comm_job(a, cancelled));
        result->set_succeeded(true);
      } else {
        run_ddp_job(a, writer, cancelled, *result);
      }
    } catch (const std::exception& e) {
      result->set_succeeded(false);
      result->set_error(e.what());
      spdlog::warn("job={} rank={} failed: {}", a.job_id(), a.rank(), e.what());
    }
    metrics->job_finished(result->succeeded());
    if (result->succeeded()) spdlog::info("job={} rank={} succeeded", a.job_id(), a.rank());
    writer.write(done);
  }

  // Trains; every step goes to the coordinator, the metrics and the debug log.
  void run_ddp_job(const v1::Assignment& a, SessionWriter& writer, std::atomic<bool>& cancelled,
                   v1::JobResult& result) {
    DdpJobOptions job = from_proto(a.spec().ddp());
    RendezvousOptions rendezvous = rendezvous_for(a, job.collective_timeout_s);
    apply_job_options(rendezvous, job);
    spdlog::info("job={} rank={} world={} rendezvous {}:{}", a.job_id(), a.rank(), a.world_size(),
                 a.master_addr(), a.master_port());
    auto comm = connect(rendezvous);
    RunningComm running(*this, comm, cancelled);
    log_transport(a, *comm);
    metrics->ddp_job_started(a.job_id(), a.rank(), job.strategy, comm->transport());
    Trainer trainer(job, comm);
    ProgressSource progress(*this, [&, job_id = a.job_id()](v1::WorkerMessage& beat) {
      beat.set_job_id(job_id);
      *beat.mutable_progress() = to_proto(trainer.position());
    });
    metrics->record_memory(trainer.memory(), /*final_points=*/false);
    auto training = trainer.run(
        [&](const StepMetrics& m) {
          metrics->record_step(m);
          spdlog::debug("job={} rank={} step={} loss={:.4f} step_ms={:.2f} comm_fraction={:.3f}",
                        a.job_id(), a.rank(), m.step, m.loss, m.step_seconds * 1e3,
                        m.comm_fraction);
          v1::WorkerMessage step;
          step.set_job_id(a.job_id());
          *step.mutable_step() = to_report(m, a.rank());
          step.mutable_step()->set_attempt(a.attempt());
          writer.write(step);
        },
        [&] { return cancelled.load(); });
    metrics->record_memory(training.memory, /*final_points=*/true);
    result.set_succeeded(true);
    if (a.rank() == 0) result.set_result_json(to_json(training).dump());
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
    std::atomic<bool> job_cancelled{false};
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
          if (describe_progress) describe_progress(beat);
        }
        writer.write(beat);
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
        job_cancelled = false;
        job_thread = std::thread([this, assignment = message.assign(), &writer, &job_cancelled] {
          run_job(assignment, writer, job_cancelled);
        });
      } else if (message.cancel_job_id() == current_job && !current_job.empty()) {
        spdlog::info("job={} cancel requested", current_job);
        job_cancelled = true;
        abort_running_job();
      }
    }
    job_cancelled = true;
    abort_running_job();
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
