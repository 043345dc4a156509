#include "coordinator_service.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <set>
#include <string_view>

#include <nlohmann/json.hpp>
#include "ddpd/fault_injection.h"
#include "ddpd/memory_estimate.h"
#include "ddpd/spec_convert.h"
#include "ddpd/stall_analysis.h"
#include "ddpd/unix_time.h"
#include "scheduling.h"
#include "session_outbox.h"
#include "straggler_watch.h"

namespace ddpd::coordinator {
namespace {

// Steps a job reports (comm jobs report none).
int64_t total_steps(const v1::JobSpec& spec) {
  return spec.has_ddp() ? from_proto(spec.ddp()).steps : 0;
}

std::string job_id_for(int64_t sequence) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "job-%06lld", static_cast<long long>(sequence));
  return buf;
}

}  // namespace

struct CoordinatorService::Session {
  grpc::ServerContext* context;
  std::unique_ptr<SessionOutbox> outbox;  // closed by the session's handler before it returns

  // Queues the message; never waits on the worker (see SessionOutbox).
  bool write(const v1::CoordinatorMessage& message) { return outbox->send(message); }
};

struct CoordinatorService::WorkerEntry {
  v1::WorkerHello hello;
  v1::WorkerState state = v1::IDLE;
  std::string job_id;
  int rank = -1;
  double last_seen = 0;
  std::chrono::steady_clock::time_point last_heartbeat;
  std::shared_ptr<Session> session;
  std::optional<v1::RankProgress> progress;  // the last heartbeat's, for job_id
  int attempt = 0;                           // of job_id that this worker runs
  // Set by the reaper when it ends a silent session, so the loss names the silence rather than
  // the cancellation it caused (a killed process also reads as a cancelled session).
  std::string silence;
};

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

}  // namespace

struct CoordinatorService::JobEntry {
  v1::Job job;
  int64_t sequence = 0;
  std::chrono::steady_clock::time_point submitted = std::chrono::steady_clock::now();
  std::map<int64_t, std::vector<v1::StepReport>> partial_steps;  // until every rank reported
  std::set<int> succeeded_ranks;
  std::vector<v1::JobEvent> events;  // what WatchJob replays and follows
  // Stall watch (DDP jobs): when the coordinator last saw any rank complete a collective or a
  // step, and each rank's (last completed sequence number, step) at that time.
  std::chrono::steady_clock::time_point last_advance;
  std::map<int, std::pair<int64_t, int64_t>> progress_marks;
  bool stall_reported = false;  // this stall episode has its incident
  // Restarts: why the running attempt ended, its world size, and the last step after which
  // every rank reported a checkpoint (0: none), which the next attempt resumes from.
  std::string restart_reason;
  int previous_world_size = 0;
  int64_t last_checkpoint_step = 0;
  std::unique_ptr<StragglerWatch> stragglers;  // DDP jobs, from RUNNING on
  int watchers = 0;                            // WatchJob streams open on this job
  int64_t step_reports = 0;                    // received (stored up to max_step_reports_per_job)
};

CoordinatorService::CoordinatorService(CoordinatorOptions options, std::unique_ptr<JobStore> store)
    : options_(std::move(options)), store_(std::move(store)) {
  // Recover: history and results as stored; jobs that were running cannot be resumed.
  for (auto& job : store_->load_jobs()) {
    auto entry = std::make_unique<JobEntry>();
    entry->job = std::move(job);
    for (const auto& t : entry->job.history())
      *entry->events.emplace_back().mutable_transition() = t;
    std::map<int64_t, std::vector<v1::StepReport>> by_step;
    for (auto& s : store_->load_steps(entry->job.job_id())) by_step[s.step()].push_back(s);
    for (auto& [step, ranks] : by_step) {
      if (static_cast<int>(ranks.size()) == entry->job.worker_ids_size()) {
        *entry->events.emplace_back().mutable_step() = aggregate_step(ranks);
      }
    }
    const std::string id = entry->job.job_id();
    job_order_.push_back(id);
    JobEntry& ref = *entry;
    jobs_[id] = std::move(entry);
    int restarts = 0;
    for (const auto& i : ref.job.incidents()) restarts += i.kind() == "restart";
    ref.job.set_attempts(ref.job.state() == v1::PENDING && restarts == 0 ? 0 : restarts + 1);
    for (const auto& [step, ranks] : by_step) {
      if (static_cast<int>(ranks.size()) < ref.job.worker_ids_size() || ranks.empty()) continue;
      for (const auto& r : ranks) {
        if (r.checkpoint_seconds() > 0) ref.last_checkpoint_step = step + 1;
      }
    }
    if (ref.job.state() == v1::RUNNING) {
      ref.previous_world_size = ref.job.worker_ids_size();
      ref.restart_reason = "coordinator restarted";
      if (may_restart(ref.job)) {
        transition(ref, v1::PENDING, "restarting after: coordinator restarted");
      } else {
        ref.job.set_error("coordinator restarted");
        transition(ref, v1::FAILED, "coordinator restarted");
      }
    }
  }
  next_sequence_ = store_->max_sequence() + 1;
  write_prometheus_targets();  // none registered yet: Prometheus scrapes no stale worker
  reaper_ = std::thread([this] { reap(); });
}

CoordinatorService::~CoordinatorService() { shutdown(); }

void CoordinatorService::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
    for (auto& [id, worker] : workers_) {
      if (worker->session) worker->session->context->TryCancel();
    }
  }
  changed_.notify_all();
  if (reaper_.joinable()) reaper_.join();
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

CoordinatorService::JobEntry* CoordinatorService::find_job(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : it->second.get();
}

void CoordinatorService::transition(JobEntry& entry, v1::JobState to, const std::string& reason) {
  v1::Job& job = entry.job;
  if (!transition_allowed(job.state(), to)) {
    throw std::logic_error("job " + job.job_id() + ": transition " +
                           v1::JobState_Name(job.state()) + " -> " + v1::JobState_Name(to) +
                           " is not allowed");
  }
  v1::StateTransition t;
  t.set_state(to);
  t.set_unix_time(unix_now());
  t.set_reason(reason);
  job.set_state(to);
  // "waiting for…" describes a pending job only: a job cancelled while pending kept it in list
  // and show.
  if (to != v1::PENDING) job.clear_pending_reason();
  *job.add_history() = t;
  *entry.events.emplace_back().mutable_transition() = t;
  store_->save_job(job, entry.sequence);
  store_->add_transition(job.job_id(), t);
  if (is_terminal(to)) store_->save_ranks(job);
  spdlog::info("job={} state={} {}", job.job_id(), v1::JobState_Name(to), reason);
  changed_.notify_all();
}

void CoordinatorService::schedule() {
  for (;;) {
    std::vector<PendingJob> pending;
    for (const auto& id : job_order_) {
      const auto& job = jobs_[id]->job;
      if (job.state() == v1::PENDING) {
        pending.push_back({id, job.spec().world_size(), required_backend(job.spec()), {}});
        if (job.attempts() > 0 && job.spec().has_ddp()) {
          // A restart may shrink to --min-world-size, at sizes the global batch divides.
          const DdpJobOptions ddp = from_proto(job.spec().ddp());
          for (int n = job.spec().world_size() - 1; n >= std::max(1, ddp.min_world_size); --n) {
            if (ddp.min_world_size > 0 && ddp.batch_size % n == 0) {
              pending.back().fallback_sizes.push_back(n);
            }
          }
        }
      }
    }
    std::vector<IdleWorker> idle;
    for (const auto& id : worker_order_) {
      const auto& w = workers_[id];
      if (w->state == v1::IDLE && w->session) {
        idle.push_back({id, {w->hello.backends().begin(), w->hello.backends().end()}});
      }
    }
    auto placement = place_next(pending, idle);
    if (!placement) {
      int registered = 0;
      for (const auto& [wid, w] : workers_) registered += w->session != nullptr;
      for (size_t i = 0; i < pending.size(); ++i) {
        jobs_[pending[i].job_id]->job.set_pending_reason(
            pending_reason(pending, i, registered, idle));
      }
      return;
    }
    JobEntry& entry = *jobs_[placement->job_id];
    const WorkerEntry& rank0 = *workers_[placement->worker_ids.front()];
    v1::Assignment assignment;
    assignment.set_job_id(entry.job.job_id());
    *assignment.mutable_spec() = entry.job.spec();
    const int attempt = entry.job.attempts();
    const int world = static_cast<int>(placement->worker_ids.size());
    assignment.set_attempt(attempt);
    entry.job.set_attempts(attempt + 1);
    assignment.set_world_size(world);
    std::string restart_text;
    if (attempt > 0 && entry.job.spec().has_ddp()) {
      auto* ddp = assignment.mutable_spec()->mutable_ddp();
      const bool resumable = !ddp->checkpoint_dir().empty();
      if (resumable)
        ddp->set_resume("auto");  // the latest checkpoint, if the last attempt made one
      ddp->clear_inject();        // fault injection fires only in the first attempt
      const std::string from =
          resumable && entry.last_checkpoint_step > 0
              ? "resuming step-" + std::to_string(entry.last_checkpoint_step) + " (" +
                    ddp->checkpoint_dir() + ")"
          : resumable ? "resuming the latest checkpoint under " + ddp->checkpoint_dir() +
                            " if there is one (this job has reported none), else "
                            "from the start"
                      : "from the start (no --checkpoint-dir)";
      restart_text = "restart " + std::to_string(attempt) + " of " +
                     std::to_string(from_proto(entry.job.spec().ddp()).max_restarts) +
                     " after: " + entry.restart_reason + "; world size " +
                     std::to_string(entry.previous_world_size) + " → " + std::to_string(world) +
                     ", " + from;
    }
    assignment.set_master_addr(rank0.hello.advertised_host());
    assignment.set_master_port(rank0.hello.rendezvous_port());
    entry.job.clear_worker_ids();
    entry.job.clear_ranks();
    for (const auto& id : placement->worker_ids) {
      auto* status = entry.job.add_ranks();
      status->set_rank(entry.job.worker_ids_size());
      status->set_worker_id(id);
      status->set_state(v1::RANK_RUNNING);
      entry.job.add_worker_ids(id);
    }
    entry.job.clear_pending_reason();
    if (entry.job.spec().has_ddp()) {
      entry.stragglers = std::make_unique<StragglerWatch>(
          world, from_proto(entry.job.spec().ddp()).straggler_threshold);
    }
    entry.last_advance = std::chrono::steady_clock::now();
    entry.progress_marks.clear();
    entry.stall_reported = false;
    entry.succeeded_ranks.clear();
    entry.partial_steps.clear();
    if (!restart_text.empty()) record_incident(entry, "restart", -1, restart_text);
    std::string armed;  // the history says when a fault injection is armed
    if (attempt == 0 && entry.job.spec().has_ddp() && !entry.job.spec().ddp().inject().empty()) {
      armed = "; fault injection armed: " +
              to_string(*parse_fault_injection(entry.job.spec().ddp().inject()));
    }
    transition(entry, v1::RUNNING,
               "placed on " + std::to_string(placement->worker_ids.size()) +
                   " workers, rendezvous " + assignment.master_addr() + ":" +
                   std::to_string(assignment.master_port()) + armed);
    for (int rank = 0; rank < static_cast<int>(placement->worker_ids.size()); ++rank) {
      WorkerEntry& worker = *workers_[placement->worker_ids[rank]];
      worker.state = v1::BUSY;
      worker.job_id = entry.job.job_id();
      worker.rank = rank;
      worker.attempt = attempt;
      worker.progress.reset();
      v1::CoordinatorMessage message;
      *message.mutable_assign() = assignment;
      message.mutable_assign()->set_rank(rank);
      worker.session->write(message);  // a dead session is noticed by its reader
    }
  }
}

void CoordinatorService::cancel_workers(JobEntry& entry) {
  for (const auto& id : entry.job.worker_ids()) {
    auto it = workers_.find(id);
    if (it == workers_.end()) continue;
    WorkerEntry& worker = *it->second;
    if (worker.job_id != entry.job.job_id() || !worker.session) continue;
    v1::CoordinatorMessage message;
    message.set_cancel_job_id(entry.job.job_id());
    worker.session->write(message);
  }
}

void CoordinatorService::fail_or_restart(JobEntry& entry, const std::string& reason) {
  if (entry.job.state() == v1::RUNNING && may_restart(entry.job)) {
    // The running attempt's ranks are told to stop; they return to IDLE as their (ignored)
    // results arrive, and schedule() starts the next attempt once enough workers are idle.
    entry.restart_reason = reason;
    entry.previous_world_size = entry.job.worker_ids_size();
    cancel_workers(entry);
    transition(entry, v1::PENDING, "restarting after: " + reason);
    schedule();
    return;
  }
  fail_job(entry, reason);
}

void CoordinatorService::fail_job(JobEntry& entry, const std::string& reason) {
  if (is_terminal(entry.job.state())) return;
  entry.job.set_error(reason);
  transition(entry, v1::FAILED, reason);
  cancel_workers(entry);
}

void CoordinatorService::record_incident(JobEntry& entry, const std::string& kind, int rank,
                                         const std::string& message) {
  v1::Incident incident;
  incident.set_unix_time(unix_now());
  incident.set_kind(kind);
  incident.set_rank(rank);
  incident.set_message(message);
  *entry.job.add_incidents() = incident;
  *entry.events.emplace_back().mutable_incident() = incident;
  store_->add_incident(entry.job.job_id(), incident);
  spdlog::warn("job={} {}", entry.job.job_id(), message);
  changed_.notify_all();
}

void CoordinatorService::record_progress(JobEntry& entry, int rank,
                                         const v1::RankProgress& progress) {
  if (rank >= 0 && rank < entry.job.ranks_size()) {
    auto* status = entry.job.mutable_ranks(rank);
    // Never behind the rank's last step report: a heartbeat may carry progress its rank sent
    // before that report (the rank's progress and its steps reach the daemon on one pipe, but the
    // heartbeat sends the latest progress on its own schedule).
    const int64_t reported_step = status->progress().step();
    *status->mutable_progress() = progress;
    status->mutable_progress()->set_step(std::max(reported_step, progress.step()));
    status->set_progress_unix_time(unix_now());
  }
  const std::pair<int64_t, int64_t> mark{progress.last_completed(), progress.step()};
  auto [it, inserted] = entry.progress_marks.emplace(rank, mark);
  if (inserted || mark > it->second) {
    it->second = mark;
    entry.last_advance = std::chrono::steady_clock::now();
    entry.stall_reported = false;
  }
}

void CoordinatorService::check_stall(JobEntry& entry, std::chrono::steady_clock::time_point now) {
  if (entry.job.state() != v1::RUNNING || !entry.job.spec().has_ddp() || entry.stall_reported) {
    return;
  }
  const DdpJobOptions job = from_proto(entry.job.spec().ddp());
  const double stalled = std::chrono::duration<double>(now - entry.last_advance).count();
  if (job.stall_seconds <= 0 || stalled < job.stall_seconds) return;
  std::vector<RankReport> ranks;
  for (int rank = 0; rank < entry.job.worker_ids_size(); ++rank) {
    RankReport report{rank, std::nullopt};
    auto it = workers_.find(entry.job.worker_ids(rank));
    if (it != workers_.end() && it->second->job_id == entry.job.job_id() && it->second->progress) {
      report.position = from_proto(*it->second->progress);
    }
    ranks.push_back(std::move(report));
  }
  const StallFinding finding = analyze_stall(ranks, stalled);
  entry.stall_reported = true;
  record_incident(entry, finding.kind, finding.rank, finding.message);
  if (job.on_stall == OnStall::kFail) fail_or_restart(entry, finding.message);
}

void CoordinatorService::record_step(JobEntry& entry, const v1::StepReport& step) {
  entry.last_advance = std::chrono::steady_clock::now();
  entry.stall_reported = false;
  if (++entry.step_reports > options_.max_step_reports_per_job) {
    if (entry.step_reports == options_.max_step_reports_per_job + 1) {
      record_incident(
          entry, "limit", step.rank(),
          "max_step_reports_per_job: " + std::to_string(options_.max_step_reports_per_job) +
              " step reports stored; later ones are dropped");
    }
    return;
  }
  store_->add_step(entry.job.job_id(), step);
  // A rank's step in diagnose is the later of its last heartbeat's and its last report's: step
  // reports outrun heartbeats, and an ended job showed the last heartbeat's (21 of 42).
  if (step.rank() >= 0 && step.rank() < entry.job.ranks_size()) {
    auto* progress = entry.job.mutable_ranks(step.rank())->mutable_progress();
    progress->set_step(std::max(progress->step(), step.step()));
  }
  auto& ranks = entry.partial_steps[step.step()];
  ranks.push_back(step);
  if (static_cast<int>(ranks.size()) == entry.job.worker_ids_size()) {
    if (entry.stragglers) {
      // Compute: the step less the time the rank was blocked on communication.
      std::vector<double> compute(ranks.size(), 0.0);
      for (const auto& r : ranks) {
        if (r.rank() >= 0 && r.rank() < static_cast<int>(compute.size())) {
          compute[r.rank()] = r.step_seconds() - r.exposed_comm_seconds();
        }
      }
      for (const auto& finding : entry.stragglers->add_step(step.step(), compute)) {
        record_incident(entry, "straggler", finding.rank, finding.message);
      }
    }
    bool checkpointed = false;
    for (const auto& r : ranks) checkpointed |= r.checkpoint_seconds() > 0;
    if (checkpointed) entry.last_checkpoint_step = step.step() + 1;
    auto* event = &entry.events.emplace_back();
    if (entry.stragglers) {
      const auto& scores = entry.stragglers->scores();
      for (int r = 0; r < static_cast<int>(scores.size()); ++r) {
        event->add_compute_scores(scores[r]);
        if (r < entry.job.ranks_size()) entry.job.mutable_ranks(r)->set_compute_score(scores[r]);
      }
    }
    *event->mutable_step() = aggregate_step(ranks);
    event->set_total_steps(total_steps(entry.job.spec()));
    entry.partial_steps.erase(step.step());
    changed_.notify_all();
  }
}

void CoordinatorService::record_result(WorkerEntry& worker, const v1::JobResult& result) {
  if (worker.job_id == result.job_id()) {
    worker.state = v1::IDLE;
    worker.job_id.clear();
    worker.rank = -1;
  }
  JobEntry* entry = find_job(result.job_id());
  if (entry != nullptr && result.attempt() != current_attempt(entry->job)) {
    schedule();  // a cancelled earlier attempt's rank: only its worker is idle again
    return;
  }
  if (entry != nullptr && result.rank() >= 0 && result.rank() < entry->job.ranks_size()) {
    entry->job.mutable_ranks(result.rank())
        ->set_state(result.succeeded()                             ? v1::RANK_SUCCEEDED
                    : result.cause() == v1::RANK_FAILURE_CANCELLED ? v1::RANK_CANCELLED
                                                                   : v1::RANK_FAILED);
    if (is_terminal(entry->job.state())) store_->save_ranks(entry->job);
  }
  if (entry != nullptr && entry->job.state() == v1::RUNNING) {
    if (!result.succeeded()) {
      // --check-collectives' verdict is the same on every rank: the first report records it.
      std::string error = result.error();
      if (result.cause() == v1::RANK_FAILURE_DESYNC) {
        record_incident(*entry, "desync", result.named_rank(), "desync: " + result.error());
        error = "collective desync (--check-collectives): " + result.error();
      }
      fail_or_restart(*entry, "rank " + std::to_string(result.rank()) + " (worker " +
                                  worker.hello.worker_id() + ") failed: " + error);
    } else {
      entry->succeeded_ranks.insert(result.rank());
      if (result.rank() == 0) entry->job.set_result_json(result.result_json());
      if (static_cast<int>(entry->succeeded_ranks.size()) == entry->job.worker_ids_size()) {
        transition(*entry, v1::SUCCEEDED, "every rank finished");
      }
    }
  }
  schedule();
}

void CoordinatorService::write_prometheus_targets() {
  if (options_.prometheus_targets.empty()) return;
  // Prometheus' file_sd format: one group per worker, so its id is a label on its series.
  nlohmann::json groups = nlohmann::json::array();
  for (const auto& id : worker_order_) {
    const WorkerEntry& worker = *workers_.at(id);
    if (!worker.session || worker.hello.metrics_port() <= 0) continue;
    groups.push_back(
        {{"targets",
          {worker.hello.advertised_host() + ":" + std::to_string(worker.hello.metrics_port())}},
         {"labels", {{"component", "worker"}, {"worker_id", id}}}});
  }
  const std::string json =
      groups.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  // Written aside and renamed, so Prometheus never reads half a file.
  const std::string tmp = options_.prometheus_targets + ".tmp";
  FILE* out = std::fopen(tmp.c_str(), "w");
  if (!out || std::fwrite(json.data(), 1, json.size(), out) != json.size() ||
      std::fclose(out) != 0 || std::rename(tmp.c_str(), options_.prometheus_targets.c_str()) != 0) {
    spdlog::warn("cannot write --prometheus-targets {}", options_.prometheus_targets);
  }
}

void CoordinatorService::worker_lost(const std::string& worker_id, Session* session,
                                     const std::string& reason) {
  auto it = workers_.find(worker_id);
  if (it == workers_.end() || it->second->session.get() != session) return;  // replaced
  // Shutting down ends every session; running jobs stay RUNNING in the store so the next
  // start marks them "coordinator restarted" rather than blaming a worker.
  if (stopping_) return;
  WorkerEntry& worker = *it->second;
  spdlog::warn("worker={} lost: {}", worker_id, reason);
  worker.session.reset();
  worker.state = v1::LOST;
  write_prometheus_targets();
  if (!worker.job_id.empty()) {
    if (JobEntry* entry = find_job(worker.job_id)) {
      if (worker.rank >= 0 && worker.rank < entry->job.ranks_size()) {
        entry->job.mutable_ranks(worker.rank)->set_state(v1::RANK_LOST);
      }
      if (worker.attempt == current_attempt(entry->job)) {
        fail_or_restart(*entry, "worker " + worker_id + " (rank " + std::to_string(worker.rank) +
                                    ") lost: " + reason);
      }
    }
    worker.job_id.clear();
    worker.rank = -1;
  }
  schedule();  // pending jobs' reasons count this worker no more
  changed_.notify_all();
}

void CoordinatorService::reap() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    changed_.wait_for(lock, std::chrono::milliseconds(500));
    store_->flush_steps_older_than(std::chrono::milliseconds(250));
    const auto now = std::chrono::steady_clock::now();
    for (auto& [id, worker] : workers_) {
      if (worker->session && worker->silence.empty() &&
          now - worker->last_heartbeat > options_.worker_timeout) {
        char text[120];
        std::snprintf(text, sizeof(text),
                      "no heartbeat for %.1f s (--worker-timeout %.1f s): the worker is stopped, "
                      "hung or cut off",
                      std::chrono::duration<double>(now - worker->last_heartbeat).count(),
                      std::chrono::duration<double>(options_.worker_timeout).count());
        worker->silence = text;
        worker->session->context->TryCancel();  // its reader then reports it lost
      }
    }
    if (options_.pending_timeout.count() > 0) {
      for (const auto& id : job_order_) {
        JobEntry& entry = *jobs_[id];
        if (entry.job.state() == v1::PENDING && now - entry.submitted > options_.pending_timeout) {
          int idle = 0;
          for (auto& [wid, w] : workers_) idle += w->state == v1::IDLE && w->session;
          fail_job(entry, "waited " + std::to_string(options_.pending_timeout.count() / 1000) +
                              " s for " + std::to_string(entry.job.spec().world_size()) +
                              " idle workers offering " + required_backend(entry.job.spec()) +
                              "; " + std::to_string(idle) + " idle");
        }
      }
    }
    for (const auto& id : job_order_) check_stall(*jobs_[id], now);
  }
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
  auto session = std::make_shared<Session>();
  session->context = context;
  session->outbox = std::make_unique<SessionOutbox>(context, stream, hello.worker_id(),
                                                    options_.max_session_queue_bytes);
  struct CloseOutbox {  // every return below: the stream must outlive the outbox's writer
    SessionOutbox& outbox;
    ~CloseOutbox() { outbox.close(); }
  } close_outbox{*session->outbox};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return {grpc::StatusCode::UNAVAILABLE, "coordinator is shutting down"};
    auto& entry = workers_[hello.worker_id()];
    if (entry && entry->session) {
      return {grpc::StatusCode::ALREADY_EXISTS,
              "worker_id: " + hello.worker_id() + " already has a live session"};
    }
    if (!entry) {
      entry = std::make_unique<WorkerEntry>();
      worker_order_.push_back(hello.worker_id());
    }
    entry->hello = hello;
    entry->state = v1::IDLE;
    entry->job_id.clear();
    entry->session = session;
    entry->silence.clear();
    entry->last_seen = unix_now();
    entry->last_heartbeat = std::chrono::steady_clock::now();
    spdlog::info("worker={} registered ({}:{}, {} cpus)", hello.worker_id(),
                 hello.advertised_host(), hello.rendezvous_port(), hello.cpu_count());
    v1::CoordinatorMessage welcome;
    welcome.set_welcome(true);
    session->write(welcome);
    write_prometheus_targets();
    schedule();
  }
  while (stream->Read(&message)) {
    struct Timed {  // reports the handling time once the lock below is released
      const CoordinatorService& service;
      const v1::WorkerMessage& message;
      std::chrono::steady_clock::time_point arrived = std::chrono::steady_clock::now();
      ~Timed() {
        if (!service.on_message_handled_) return;
        const char* kind = message.has_step()     ? "step"
                           : message.has_result() ? "result"
                                                  : "heartbeat";
        service.on_message_handled_(
            kind,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - arrived).count());
      }
    } timed{*this, message};
    std::lock_guard<std::mutex> lock(mutex_);
    WorkerEntry& worker = *workers_[hello.worker_id()];
    worker.last_seen = unix_now();
    worker.last_heartbeat = std::chrono::steady_clock::now();
    if (message.has_progress() && !message.job_id().empty() && message.job_id() == worker.job_id) {
      worker.progress = message.progress();
      JobEntry* entry = find_job(message.job_id());
      if (entry && entry->job.state() == v1::RUNNING &&
          worker.attempt == current_attempt(entry->job)) {
        record_progress(*entry, worker.rank, message.progress());
      }
    }
    if (message.has_step()) {
      JobEntry* entry = find_job(message.job_id());
      if (on_step_report_) on_step_report_();
      if (entry && entry->job.state() == v1::RUNNING &&
          message.step().attempt() == current_attempt(entry->job)) {
        record_step(*entry, message.step());
      }
    } else if (message.has_result()) {
      record_result(worker, message.result());
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string overflowed = session->outbox->overflowed();
  auto it = workers_.find(hello.worker_id());
  const std::string silence = it != workers_.end() ? it->second->silence : "";
  worker_lost(hello.worker_id(), session.get(),
              !overflowed.empty()      ? overflowed
              : !silence.empty()       ? silence
              : context->IsCancelled() ? "its connection broke (the worker process exited or was "
                                         "killed, or its host went down)"
                                       : "it closed its session");
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::SubmitJob(grpc::ServerContext* context,
                                           const v1::SubmitJobRequest* request, v1::Job* reply) {
  if (auto status = authorize(*context); !status.ok()) return status;
  try {
    validate_spec(request->spec(), FieldNames::kProto);  // API callers know fields, not flags
  } catch (const OptionError& e) {
    return {grpc::StatusCode::INVALID_ARGUMENT, e.what()};
  }
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t pending = 0;
  for (const auto& [id, job] : jobs_) pending += job->job.state() == v1::PENDING;
  if (pending >= options_.max_pending_jobs) {
    return {grpc::StatusCode::RESOURCE_EXHAUSTED,
            "max_pending_jobs: " + std::to_string(pending) + " jobs are already pending (limit " +
                std::to_string(options_.max_pending_jobs) + "); retry when some have started"};
  }
  if (request->spec().has_ddp()) {
    // Admission by memory: a rank must fit on some worker. Workers advertise their memory in
    // their hello; with none registered (or none advertising) there is nothing to check yet.
    int64_t largest = 0;
    for (const auto& [id, worker] : workers_) {
      largest = std::max(largest, worker->hello.memory_bytes());
    }
    try {
      check_fits_in_memory(from_proto(request->spec().ddp()), request->spec().world_size(), largest,
                           "the largest registered worker's memory");
    } catch (const OptionError& e) {
      return {grpc::StatusCode::RESOURCE_EXHAUSTED, naming_proto_field(e).what()};
    }
  }
  JobEntry* resumed = nullptr;
  if (!request->resumes_job_id().empty()) {
    resumed = find_job(request->resumes_job_id());
    if (!resumed) {
      return {grpc::StatusCode::NOT_FOUND, "resumes_job_id: no job " + request->resumes_job_id()};
    }
  }
  auto entry = std::make_unique<JobEntry>();
  entry->sequence = next_sequence_++;
  entry->job.set_job_id(job_id_for(entry->sequence));
  *entry->job.mutable_spec() = request->spec();
  entry->job.set_state(v1::PENDING);
  v1::StateTransition t;
  t.set_state(v1::PENDING);
  t.set_unix_time(unix_now());
  t.set_reason(resumed ? "submitted: resumes " + resumed->job.job_id() + "'s latest checkpoint"
                       : "submitted");
  *entry->job.add_history() = t;
  *entry->events.emplace_back().mutable_transition() = t;
  store_->save_job(entry->job, entry->sequence);
  store_->add_transition(entry->job.job_id(), t);
  const std::string id = entry->job.job_id();
  job_order_.push_back(id);
  jobs_[id] = std::move(entry);
  if (resumed) {
    // Both histories name the link: this job's submission, and an event on the resumed one.
    record_incident(
        *resumed, "resumed", -1,
        "resumed as " + id + " (world size " + std::to_string(request->spec().world_size()) + ")");
  }
  spdlog::info("job={} submitted (world size {})", id, request->spec().world_size());
  schedule();
  *reply = jobs_[id]->job;
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::GetJob(grpc::ServerContext* context,
                                        const v1::GetJobRequest* request, v1::GetJobReply* reply) {
  if (auto status = authorize(*context); !status.ok()) return status;
  std::lock_guard<std::mutex> lock(mutex_);
  JobEntry* entry = find_job(request->job_id());
  if (!entry) return {grpc::StatusCode::NOT_FOUND, "job_id: no job " + request->job_id()};
  *reply->mutable_job() = entry->job;
  if (request->with_steps()) {
    for (auto& s : store_->load_steps(request->job_id())) *reply->add_steps() = s;
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest*,
                                          v1::ListJobsReply* reply) {
  if (auto status = authorize(*context); !status.ok()) return status;
  std::lock_guard<std::mutex> lock(mutex_);
  // A summary per job, of a size that does not grow with the job (GetJob has the whole job):
  // with 10,000 jobs in history, or specs with thousands of comm sizes, whole jobs would pass
  // gRPC's 4 MiB default message limit of the clients.
  for (const auto& id : job_order_) {
    const v1::Job& whole = jobs_[id]->job;
    v1::Job* job = reply->add_jobs();
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
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::CancelJob(grpc::ServerContext* context,
                                           const v1::CancelJobRequest* request, v1::Job* reply) {
  if (auto status = authorize(*context); !status.ok()) return status;
  std::lock_guard<std::mutex> lock(mutex_);
  JobEntry* entry = find_job(request->job_id());
  if (!entry) return {grpc::StatusCode::NOT_FOUND, "job_id: no job " + request->job_id()};
  if (is_terminal(entry->job.state())) {
    return {grpc::StatusCode::FAILED_PRECONDITION,
            "job " + request->job_id() + " is already " + v1::JobState_Name(entry->job.state())};
  }
  transition(*entry, v1::CANCELLED, "cancelled by request");
  cancel_workers(*entry);
  *reply = entry->job;
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::WatchJob(grpc::ServerContext* context,
                                          const v1::WatchJobRequest* request,
                                          grpc::ServerWriter<v1::JobEvent>* writer) {
  if (auto status = authorize(*context); !status.ok()) return status;
  std::unique_lock<std::mutex> lock(mutex_);
  JobEntry* entry = find_job(request->job_id());
  if (!entry) return {grpc::StatusCode::NOT_FOUND, "job_id: no job " + request->job_id()};
  if (entry->watchers >= options_.max_watchers_per_job) {
    return {grpc::StatusCode::RESOURCE_EXHAUSTED,
            "max_watchers_per_job: job " + request->job_id() + " already has " +
                std::to_string(entry->watchers) + " watchers"};
  }
  ++entry->watchers;
  struct Unwatch {  // every return below, with mutex_ held
    JobEntry* entry;
    ~Unwatch() { --entry->watchers; }
  } unwatch{entry};
  size_t cursor = 0;
  const int64_t total = total_steps(entry->job.spec());
  for (;;) {
    while (cursor < entry->events.size()) {
      v1::JobEvent event = entry->events[cursor++];
      event.set_total_steps(total);
      lock.unlock();
      const bool ok = writer->Write(event);
      lock.lock();
      if (!ok) return grpc::Status::OK;  // the watcher went away
    }
    if (is_terminal(entry->job.state()) || stopping_ || context->IsCancelled()) break;
    changed_.wait_for(lock, std::chrono::milliseconds(250));
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::ListWorkers(grpc::ServerContext* context,
                                             const v1::ListWorkersRequest*,
                                             v1::ListWorkersReply* reply) {
  if (auto status = authorize(*context); !status.ok()) return status;
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& id : worker_order_) {
    const WorkerEntry& w = *workers_[id];
    auto* info = reply->add_workers();
    *info->mutable_hello() = w.hello;
    info->set_state(w.state);
    info->set_job_id(w.job_id);
    info->set_last_seen_unix_time(w.last_seen);
  }
  return grpc::Status::OK;
}

StateCounts CoordinatorService::state_counts() const {
  std::lock_guard<std::mutex> lock(mutex_);
  StateCounts counts;
  for (const auto& [id, worker] : workers_) ++counts.workers[v1::WorkerState_Name(worker->state)];
  for (const auto& [id, entry] : jobs_) {
    ++counts.jobs[v1::JobState_Name(entry->job.state())];
    counts.queue_length += entry->job.state() == v1::PENDING;
  }
  int ended_with_scores = 0;
  for (auto id = job_order_.rbegin(); id != job_order_.rend(); ++id) {
    const v1::Job& job = jobs_.at(*id)->job;
    if (job.ranks_size() == 0 || !job.ranks(0).has_compute_score()) continue;
    if (job.state() != v1::RUNNING && ++ended_with_scores > kRetainedScoreJobs) continue;
    for (const auto& r : job.ranks()) {
      if (r.has_compute_score())
        counts.compute_scores[{job.job_id(), r.rank()}] = r.compute_score();
    }
  }
  return counts;
}

}  // namespace ddpd::coordinator
