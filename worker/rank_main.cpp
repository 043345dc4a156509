#include "rank_main.h"

#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <mutex>
#include <optional>
#include <thread>

#include "ddpd/api/restart_policy.h"
#include "ddpd/api/spec_convert.h"
#include "ddpd/api/step_report.h"
#include "ddpd/common/checkpoint_facts.h"
#include "ddpd/common/result_json.h"
#include "ddpd/common/unreadable_path.h"
#include "ddpd/core/comm_bench.h"
#include "ddpd/core/communicator.h"
#include "ddpd/core/hf_export.h"
#include "ddpd/core/rendezvous.h"
#include "ddpd/core/trainer.h"
#include "frame_pipe.h"
#include "rank_pipe.pb.h"

namespace ddpd {
namespace {

constexpr int kEventFd = 3;  // rank_process.h: the events go to fd 3, stdin carries the stop

// The step's figures (ddpd/api/step_report.h) and its spans, which only per-rank reports carry.
v1::StepReport report_with_spans(const StepMetrics& m, int rank, int attempt) {
  v1::StepReport r = to_report(m, rank, attempt);
  for (const auto& span : m.spans) {
    auto* out = r.add_spans();
    out->set_name(span.name);
    out->set_communication(span.communication);
    out->set_begin_unix_s(span.begin_unix_s);
    out->set_end_unix_s(span.end_unix_s);
  }
  return r;
}

v1::CollectiveFailureCause to_proto(CollectiveFailure cause) {
  switch (cause) {
    case CollectiveFailure::kTimedOut:
      return v1::COLLECTIVE_FAILURE_TIMED_OUT;
    case CollectiveFailure::kPeerExited:
      return v1::COLLECTIVE_FAILURE_PEER_EXITED;
    case CollectiveFailure::kPeerSilent:
      return v1::COLLECTIVE_FAILURE_PEER_SILENT;
    case CollectiveFailure::kAborted:
      return v1::COLLECTIVE_FAILURE_ABORTED;
    case CollectiveFailure::kDesync:  // reported as RANK_FAILURE_DESYNC
      return v1::COLLECTIVE_FAILURE_UNSPECIFIED;
    case CollectiveFailure::kBackend:
      break;
  }
  return v1::COLLECTIVE_FAILURE_BACKEND;
}

void to_proto(const MemoryBytes& in, rank_pipe::Memory& out) {
  out.set_param_bytes(in.param_bytes);
  out.set_grad_bytes(in.grad_bytes);
  out.set_optimizer_state_bytes(in.optimizer_state_bytes);
  out.set_peak_bytes(in.peak_bytes);
}

rank_pipe::RankEvent memory_event(const MemoryProfile& profile, bool final_points) {
  rank_pipe::RankEvent e;
  auto* m = e.mutable_memory();
  m->set_final_points(final_points);
  to_proto(profile.after_init, *m->mutable_after_init());
  to_proto(profile.before_step, *m->mutable_before_step());
  to_proto(profile.after_step, *m->mutable_after_step());
  m->set_step_peak_tensor_bytes(profile.step_peak_tensor_bytes);
  m->set_step_peak_activation_bytes(profile.step_peak_activation_bytes);
  return e;
}

rank_pipe::RankEvent comm_event(const CommBenchResult& bench) {
  rank_pipe::RankEvent e;
  auto* c = e.mutable_comm();
  c->set_world_size(bench.world_size);
  for (const auto& row : bench.rows) {
    auto* out = c->add_rows();
    out->set_collective(enum_name(row.collective));
    out->set_size_bytes(row.size_bytes);
    out->set_time_s(row.time_s);
    out->set_algbw_bytes_per_s(row.algbw_bytes_per_s);
    out->set_busbw_bytes_per_s(row.busbw_bytes_per_s);
  }
  return e;
}

// The sockets the daemon held (gRPC, /metrics) must not stay open in the rank: a rank outliving
// a restarted daemon would hold its ports. Only sockets are closed: libraries may have opened
// files before main.
void close_inherited_sockets() {
  const int limit = static_cast<int>(sysconf(_SC_OPEN_MAX));
  for (int fd = kEventFd + 1; fd < limit && fd < 65536; ++fd) {
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) ::close(fd);
  }
}

// One rank's run. Thread contract: the main thread runs the job and writes its events; the stop
// watcher thread blocks on stdin, queues the coordinator's HealGroups for the main thread's
// regroup (heals_, heal_cv_) and aborts the communicator at end of file; the progress thread
// writes Progress events. Event writes are serialised by events_mutex; the communicator and
// trainer pointers are published under state_mutex.
class RankRun {
 public:
  RankRun(const RankMainOptions& options, v1::Assignment assignment)
      : options_(options), a_(std::move(assignment)) {}

  void run() {
    std::thread watcher([this] { watch_for_stop(); });
    watcher.detach();  // blocked in read(0) until the daemon closes stdin or we exit
    std::thread progress([this] { send_progress(); });
    v1::JobResult result = run_and_classify();
    {
      std::lock_guard<std::mutex> lock(state_mutex_);
      finished_ = true;
    }
    progress_cv_.notify_all();
    progress.join();
    {
      std::lock_guard<std::mutex> lock(state_mutex_);
      comm_.reset();  // the communicator ends here, not under the stop watcher's feet
    }
    rank_pipe::RankEvent last;
    *last.mutable_result() = std::move(result);
    write(last);
  }

 private:
  bool write(const rank_pipe::RankEvent& event) {
    std::lock_guard<std::mutex> lock(events_mutex_);
    return write_frame(kEventFd, event);
  }

  // Reads the daemon's Controls until stdin ends: then the rank stops.
  void watch_for_stop() {
    rank_pipe::Control control;
    while (read_frame(0, control)) {
      std::lock_guard<std::mutex> lock(state_mutex_);
      if (control.stop_after_checkpoint()) {
        stop_after_checkpoint_ = true;
        if (trainer_) trainer_->stop_after_next_checkpoint();
      }
      if (!control.has_heal()) continue;
      heals_.push_back(control.heal());
      // A rank whose worker was lost may still be in the old group, its collectives holding
      // ours: they end now, and the trainer regroups.
      if (comm_) comm_->abort();
      heal_cv_.notify_all();
    }
    std::lock_guard<std::mutex> lock(state_mutex_);
    cancelled_ = true;
    heal_cv_.notify_all();
    if (comm_) comm_->abort();
  }

  // Trainer's Regroup (docs/healing.md): waits for the coordinator's HealGroup of `generation`
  // (up to the collective timeout; a cancel, when the coordinator restarts or fails the job
  // instead, ends the wait at once) and forms that group.
  GroupGeneration regroup(const DdpJobOptions& job, int generation, const CollectiveError& failure,
                          Communicator& previous) {
    // The transport names the peer only when it saw it leave; the coordinator's HealGroup, and
    // the state transfer, name the rank replaced.
    const std::string peer = failure.peer_rank() >= 0
                                 ? "rank " + std::to_string(failure.peer_rank())
                                 : "a rank the transport did not name";
    spdlog::warn(
        "job={} rank={} lost a peer ({}): waiting for the coordinator's group generation {}",
        a_.job_id(), a_.rank(), peer, generation);
    std::optional<v1::HealGroup> heal;
    {
      std::unique_lock<std::mutex> lock(state_mutex_);
      auto found = [&] {
        for (const auto& h : heals_) {
          if (h.generation() == generation) heal = h;
        }
        return heal.has_value() || cancelled_;
      };
      heal_cv_.wait_for(lock, std::chrono::duration<double>(job.collective_timeout_s), found);
      if (cancelled_ || !heal) return {};
    }
    // Shrunk in place (no spare): one rank fewer, those above the lost one a number lower.
    const int rank_before = a_.rank();
    a_.set_rank(rank_after_heal(*heal, a_.world_size(), a_.rank()));
    if (heal->world_size() > 0) a_.set_world_size(heal->world_size());
    if (a_.rank() != rank_before) {
      spdlog::info("job={} rank {} is rank {} of {} from group generation {}", a_.job_id(),
                   rank_before, a_.rank(), a_.world_size(), generation);
    }
    RendezvousOptions r = rendezvous(job.collective_timeout_s);
    apply_job_options(r, job);
    r.master_addr = heal->master_addr();
    r.master_port = heal->master_port();
    std::shared_ptr<Communicator> comm;
    try {
      comm = connect_generation(r, generation, &previous, [this] { return cancelled_.load(); });
    } catch (const RendezvousAbandoned&) {
      return {};  // cancelled while a peer of the new generation had not come
    }
    publish(comm, nullptr, /*keep_trainer=*/true);
    if (a_.rank() != rank_before) started(*comm);  // relabels the daemon's series
    return {comm, heal->lost_rank()};
  }

  void send_progress() {
    std::unique_lock<std::mutex> lock(state_mutex_);
    const auto interval = std::chrono::duration<double>(options_.progress_seconds);
    while (!progress_cv_.wait_for(lock, interval, [&] { return finished_; })) {
      // The rank's own heartbeat: the daemon takes a silent rank for a stopped one.
      rank_pipe::RankEvent e;
      if (trainer_) {
        *e.mutable_progress() = to_proto(trainer_->position());
      } else {
        e.set_alive(true);
      }
      lock.unlock();
      write(e);
      lock.lock();
    }
  }

  void publish(std::shared_ptr<Communicator> comm, Trainer* trainer, bool keep_trainer = false) {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (comm && cancelled_) comm->abort();  // stopped while it met its peers
    if (comm) comm_ = std::move(comm);
    if (!keep_trainer) trainer_ = trainer;
    if (trainer && stop_after_checkpoint_) trainer->stop_after_next_checkpoint();  // asked before
  }

  RendezvousOptions rendezvous(double timeout_s) const {
    RendezvousOptions r;
    r.master_addr = a_.master_addr();
    r.master_port = a_.master_port();
    r.rank = a_.rank();
    r.world_size = a_.world_size();
    r.local_rank = options_.cuda_device;  // NCCL jobs run on the daemon's GPU
    r.local_address = options_.advertise_host;
    r.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    return r;
  }

  void started(const Communicator& comm) {
    if (!comm.info().transport_note.empty()) {
      spdlog::warn("job={} rank={} {}", a_.job_id(), a_.rank(), comm.info().transport_note);
    } else {
      spdlog::info("job={} rank={} transport {}", a_.job_id(), a_.rank(),
                   enum_name(comm.info().transport));
    }
    rank_pipe::RankEvent e;
    e.mutable_started()->set_transport(enum_name(comm.info().transport));
    e.mutable_started()->set_transport_note(comm.info().transport_note);
    e.mutable_started()->set_rank(comm.info().rank);
    write(e);
  }

  // The spare's way in (docs/healing.md): generation `join`'s group, left at once on a cancel.
  std::shared_ptr<Communicator> join_generation(const RendezvousOptions& r, int join) {
    try {
      return connect_generation(r, join, nullptr, [this] { return cancelled_.load(); });
    } catch (const RendezvousAbandoned& e) {
      throw JobCancelled(e.what());
    }
  }

  // Returns rank 0's result JSON (other ranks: empty).
  std::string run_comm_job() {
    const CommJob job = from_proto(a_.spec().comm());
    RendezvousOptions r = rendezvous(job.collective_timeout_s);
    r.backend = job.backend;
    r.transport = job.transport;
    auto comm = connect(r);
    publish(comm, nullptr);
    started(*comm);
    const CommBenchResult bench = run_comm_benchmark(job.bench, *comm);
    warn_if_fallback(bench.shared_buffers_fallback);
    write(comm_event(bench));
    return a_.rank() == 0 ? to_json(bench).dump() : "";
  }

  void warn_if_fallback(const std::optional<SharedBufferFallback>& fallback) const {
    if (fallback) spdlog::warn("job={} rank={} {}", a_.job_id(), a_.rank(), describe(*fallback));
  }

  std::string run_ddp_job() {
    DdpJobOptions job = from_proto(a_.spec().ddp());
    // The checkpoint a resume continues, named in the result; a first attempt that would train
    // no step from it fails at once, naming both numbers (a restart's "auto" may be at the end).
    const auto resumed = read_checkpoint_facts(job.resume, job.checkpoint_dir);
    if (resumed && a_.attempt() == 0 && job.resume != "auto") check_resume(job, *resumed);
    RendezvousOptions r = rendezvous(job.collective_timeout_s);
    apply_job_options(r, job);
    spdlog::info("job={} rank={} world={} rendezvous {}:{}", a_.job_id(), a_.rank(),
                 a_.world_size(), a_.master_addr(), a_.master_port());
    const int join = a_.join_generation();
    auto comm = join > 0 ? join_generation(r, join) : connect(r);
    publish(comm, nullptr);
    started(*comm);
    Trainer trainer(job, comm, {}, join);
    publish(nullptr, &trainer);
    write(memory_event(trainer.memory(), /*final_points=*/false));
    // A job with restarts left may heal in place (the coordinator decides whether it does).
    Regroup regroup;
    if (job.max_restarts > 0 && !job.no_heal) {
      regroup = [&](int generation, const CollectiveError& failure, Communicator& previous) {
        return this->regroup(job, generation, failure, previous);
      };
    }
    TrainingResult training;
    try {
      training = trainer.run(
          [&](const StepMetrics& m) {
            rank_pipe::RankEvent e;
            *e.mutable_step() = report_with_spans(m, a_.rank(), a_.attempt());
            write(e);
          },
          [&] { return cancelled_.load(); }, regroup);
    } catch (const StoppedAtCheckpoint& e) {
      publish(nullptr, nullptr);
      // Only an orphaned daemon asks (worker_daemon.cpp, stop_orphan); its peers stop with it.
      const std::string whose =
          e.asking_rank() == a_.rank()
              ? "no coordinator"
              : "rank " + std::to_string(e.asking_rank()) + "'s worker had no coordinator";
      throw JobCancelled("orphaned: stopped after writing the checkpoint of step " +
                         std::to_string(e.steps_done()) + " (" + whose + " for --orphan-timeout)");
    } catch (...) {
      publish(nullptr, nullptr);
      throw;
    }
    publish(nullptr, nullptr);
    // --export-hf keeps the imported model's tokenizer (rank 0 wrote the export).
    if (a_.rank() == 0 && !job.export_hf.empty() && !job.init_from.empty()) {
      copy_hf_side_files(job.init_from, job.export_hf);
    }
    warn_if_fallback(training.shared_buffers_fallback);
    write(memory_event(training.memory, /*final_points=*/true));
    if (a_.rank() != 0) return "";
    nlohmann::json result = to_json(training);
    if (resumed) result["resumed_from"] = {{"step", resumed->step}, {"checkpoint", resumed->dir}};
    return result.dump();
  }

  // A job's path this worker cannot open: which worker, on which host, and what to do. ddpctl
  // checked it on the user's host and sent it absolute; a worker elsewhere needs it too.
  std::string where_unreadable(const UnreadablePath& e) const {
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    return std::string(e.what()) + " (on worker " +
           (options_.worker_id.empty() ? std::string("?") : options_.worker_id) + ", host " + host +
           "): " + e.path() +
           " must exist on every worker, at the same absolute path (a shared filesystem, or a "
           "copy on each host)";
  }

  v1::JobResult run_and_classify() {
    v1::JobResult r;
    r.set_job_id(a_.job_id());
    r.set_rank(a_.rank());
    r.set_attempt(a_.attempt());
    r.set_named_rank(-1);
    auto fail = [&](v1::RankFailureCause cause, const std::string& error) {
      // A rank told to stop reports that, whatever its aborted collective threw.
      r.set_cause(cancelled_ ? v1::RANK_FAILURE_CANCELLED : cause);
      r.set_error(error);
      spdlog::warn("job={} rank={} failed: {}", a_.job_id(), a_.rank(), error);
    };
    try {
      r.set_result_json(a_.spec().has_comm() ? run_comm_job() : run_ddp_job());
      r.set_succeeded(true);
      spdlog::info("job={} rank={} succeeded", a_.job_id(), a_.rank());
    } catch (const JobCancelled& e) {
      fail(v1::RANK_FAILURE_CANCELLED, e.what());
    } catch (const CollectiveDesync& e) {
      r.set_named_rank(e.named_rank());
      fail(v1::RANK_FAILURE_DESYNC, e.finding());
    } catch (const CollectiveError& e) {
      r.set_named_rank(e.peer_rank());
      r.set_collective_cause(to_proto(e.cause()));
      fail(v1::RANK_FAILURE_COLLECTIVE, e.what());
    } catch (const UnreadablePath& e) {
      fail(v1::RANK_FAILURE_ERROR, where_unreadable(e));
    } catch (const std::exception& e) {
      fail(v1::RANK_FAILURE_ERROR, e.what());
    }
    r.set_rank(a_.rank());  // as it ended: a shrink in place renumbers it
    return r;
  }

  const RankMainOptions options_;
  // The job thread's: a shrinking HealGroup renumbers the rank in it (regroup()), on the thread
  // that reads it.
  v1::Assignment a_;
  std::atomic<bool> cancelled_{false};
  // The daemon is orphaned (set by the watcher, under state_mutex_ with the trainer's request).
  std::atomic<bool> stop_after_checkpoint_{false};
  std::mutex events_mutex_;
  std::mutex state_mutex_;
  std::condition_variable progress_cv_;
  std::shared_ptr<Communicator> comm_;
  Trainer* trainer_ = nullptr;
  bool finished_ = false;
  std::vector<v1::HealGroup> heals_;  // the coordinator's, as the stop watcher read them
  std::condition_variable heal_cv_;
};

}  // namespace

int run_rank_process(const RankMainOptions& options) {
  // Die with the daemon: a rank whose daemon is gone would hold its peers and its ports. (A
  // daemon that died before this line closed our stdin: the rank stops at once all the same.
  // getppid() cannot tell: in a container the daemon itself is pid 1.)
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The daemon may have died between spawning us and the line above: then no signal will ever
  // come, and a rank that had already been handed its assignment would go on to wait for peers
  // for the whole collective timeout. The daemon passes its pid; a parent that is no longer it
  // means it is gone. (In a container the daemon is pid 1 and its death ends the container.)
  if (options.daemon_pid > 0 && getppid() != options.daemon_pid) {
    std::fprintf(stderr, "error: the worker daemon (pid %d) exited before this rank started\n",
                 options.daemon_pid);
    return 1;
  }
  close_inherited_sockets();
  v1::Assignment assignment;
  if (!read_frame(0, assignment)) {
    std::fprintf(stderr, "error: ddpd-worker rank reads its assignment from the daemon on stdin\n");
    return 2;
  }
  // Named once it has a job: a daemon keeps its next rank process waiting beside the running one
  // (StartedRankProcess), and `ps` and the tests tell them apart by this name.
  prctl(PR_SET_NAME, kRankProcessName);
  // Not destroyed: the detached stop watcher may still wake on stdin as the process exits.
  auto* run = new RankRun(options, std::move(assignment));
  run->run();
  return 0;
}

}  // namespace ddpd
