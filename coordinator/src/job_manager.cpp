// JobManager: the tables, workers coming and going, submissions, results and endings. Placement
// is in job_placement.cpp, step aggregation and the periodic checks in job_monitor.cpp.
#include "job_manager.h"

#include <spdlog/spdlog.h>

#include <cstdio>

#include "ddpd/api/restart_policy.h"
#include "ddpd/api/spec_convert.h"
#include "ddpd/common/checkpoint_facts.h"

namespace ddpd::coordinator {
namespace {

std::string job_id_for(int64_t sequence) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "job-%06lld", static_cast<long long>(sequence));
  return buf;
}

// The job's complete steps (every rank reported), by step, from the reports in the store. A job
// that shrank in place has fewer ranks now than its steps before the shrink had.
std::map<int64_t, std::vector<v1::StepReport>> complete_steps(
    const std::vector<v1::StepReport>& stored, const v1::Job& job) {
  std::map<int64_t, std::vector<v1::StepReport>> by_step;
  for (const auto& s : stored) by_step[s.step()].push_back(s);
  for (auto it = by_step.begin(); it != by_step.end();) {
    const bool complete = static_cast<int>(it->second.size()) >= job.worker_ids_size();
    it = complete ? std::next(it) : by_step.erase(it);
  }
  return by_step;
}

}  // namespace

JobManager::JobManager(const CoordinatorOptions& options, JobStore& store,
                       const LifecycleClock& clock, std::function<void()> on_change)
    : options_(options), store_(store), clock_(clock), on_change_(std::move(on_change)) {
  recover();
  next_sequence_ = store_.max_sequence() + 1;
  write_prometheus_targets();  // none registered yet: Prometheus scrapes no stale worker
}

void JobManager::recover() {
  // History and results as stored; jobs that were running are adopted, or restart or fail.
  std::vector<int64_t> sequences;
  auto stored_jobs = store_.load_jobs(sequences);
  for (size_t i = 0; i < stored_jobs.size(); ++i) {
    auto owned = std::make_unique<JobEntry>();
    JobEntry& entry = *owned;
    entry.job = std::move(stored_jobs[i]);
    entry.ddp = ddp_options_of(entry.job.spec());
    entry.sequence = sequences[i];
    entry.submitted = clock_.steady_now();
    const std::string id = entry.job.job_id();
    job_order_.push_back(id);
    jobs_[id] = std::move(owned);
    for (const auto& t : entry.job.history()) *entry.events.emplace_back().mutable_transition() = t;
    const std::vector<v1::StepReport> stored_steps = store_.load_steps(id);
    for (const auto& [step, ranks] : complete_steps(stored_steps, entry.job)) {
      *entry.events.emplace_back().mutable_step() = aggregate_step(ranks);
      for (const auto& r : ranks) {
        if (r.checkpoint_seconds() > 0) entry.last_checkpoint_step = step + 1;
      }
    }
    int restarts = 0;
    const std::string& restart = enum_name(IncidentKind::kRestart);
    for (const auto& i : entry.job.incidents()) restarts += i.kind() == restart;
    entry.job.set_attempts(entry.job.state() == v1::PENDING && restarts == 0 ? 0 : restarts + 1);
    if (entry.job.state() == v1::RUNNING && options_.adopt) {
      restore_steps(entry, stored_steps);
      begin_adoption(entry);
    } else if (entry.job.state() == v1::RUNNING) {
      entry.previous_world_size = entry.job.worker_ids_size();
      entry.restart_reason = "coordinator restarted";
      if (may_restart(entry.job, entry.ddp)) {
        transition(entry, v1::PENDING, "restarting after: coordinator restarted");
      } else {
        entry.job.set_error("coordinator restarted");
        transition(entry, v1::FAILED, "coordinator restarted");
      }
    }
  }
}

JobManager::WorkerEntry* JobManager::find_worker(const std::string& worker_id) {
  auto it = workers_.find(worker_id);
  return it == workers_.end() ? nullptr : it->second.get();
}

JobManager::JobEntry* JobManager::find_job(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : it->second.get();
}

const v1::Job* JobManager::job(const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : &it->second->job;
}

int64_t JobManager::total_steps(const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || !it->second->job.spec().has_ddp()) return 0;
  return it->second->ddp.steps;
}

const std::vector<v1::JobEvent>* JobManager::events(const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : &it->second->events;
}

std::optional<Refusal> JobManager::register_worker(const v1::WorkerHello& hello,
                                                   std::shared_ptr<WorkerLink> link) {
  if (stopping_) return Refusal{Refusal::Code::kUnavailable, "coordinator is shutting down"};
  auto& entry = workers_[hello.worker_id()];
  // The same daemon coming back on a new connection before its old session's end was seen (a
  // half-open connection) claims the rank it holds: the new session replaces the old one.
  const bool same_rank = entry && hello.has_claim() && entry->job_id == hello.claim().job_id() &&
                         entry->rank == hello.claim().rank();
  if (entry && entry->link && !same_rank) {
    return Refusal{Refusal::Code::kAlreadyExists,
                   "worker_id: " + hello.worker_id() + " already has a live session"};
  }
  if (!entry) {
    entry = std::make_unique<WorkerEntry>();
    worker_order_.push_back(hello.worker_id());
  }
  if (entry->link) entry->link->disconnect();  // its loss is ignored: the link is replaced
  if (!hello.has_claim() && !entry->job_id.empty()) {
    // A daemon back without the rank it ran (it restarted): that rank is gone.
    lose_rank_of(*entry, "its worker " + hello.worker_id() +
                             " registered again without it (the daemon restarted)");
  }
  entry->hello = hello;
  entry->state = v1::IDLE;
  entry->job_id.clear();
  entry->rank = -1;
  entry->link = std::move(link);
  entry->silence.clear();
  entry->received_seq = entry->acknowledged_seq = 0;  // sequence numbers are per session's sender
  entry->last_seen = clock_.unix_seconds();
  entry->last_heartbeat = clock_.steady_now();
  spdlog::info("worker={} registered ({}:{}, {} cpus){}", hello.worker_id(),
               hello.advertised_host(), hello.rendezvous_port(), hello.cpu_count(),
               hello.has_claim() ? ", claiming rank " + std::to_string(hello.claim().rank()) +
                                       " of " + hello.claim().job_id()
                                 : "");
  v1::CoordinatorMessage welcome;
  welcome.set_welcome(true);
  entry->link->send(welcome);
  if (hello.has_claim()) claim(*entry, hello.claim());
  write_prometheus_targets();
  place();
  return std::nullopt;
}

void JobManager::on_message(const std::string& worker_id, const v1::WorkerMessage& message) {
  WorkerEntry* worker = find_worker(worker_id);
  if (!worker) return;
  worker->last_seen = clock_.unix_seconds();
  worker->last_heartbeat = clock_.steady_now();
  note_sequence(*worker, message);
  if (message.has_progress()) on_progress(worker_id, message.job_id(), message.progress());
  if (message.has_step()) {
    on_step(message.job_id(), message.step());
  } else if (message.has_result()) {
    on_result(worker_id, message.result());
  }
}

void JobManager::on_progress(const std::string& worker_id, const std::string& job_id,
                             const v1::RankProgress& progress) {
  WorkerEntry* worker = find_worker(worker_id);
  if (!worker || job_id.empty() || job_id != worker->job_id) return;
  worker->progress = progress;
  JobEntry* entry = find_job(job_id);
  if (!entry || entry->job.state() != v1::RUNNING ||
      worker->attempt != current_attempt(entry->job)) {
    return;
  }
  const int rank = worker->rank;
  if (rank >= 0 && rank < entry->job.ranks_size()) {
    auto* status = entry->job.mutable_ranks(rank);
    // Never behind the rank's last step report: a heartbeat may carry progress its rank sent
    // before that report (the rank's progress and its steps reach the daemon on one pipe, but the
    // heartbeat sends the latest progress on its own schedule).
    const int64_t reported_step = status->progress().step();
    *status->mutable_progress() = progress;
    status->mutable_progress()->set_step(std::max(reported_step, progress.step()));
    status->set_progress_unix_time(clock_.unix_seconds());
  }
  const std::pair<int64_t, int64_t> mark{progress.last_completed(), progress.step()};
  auto [it, inserted] = entry->progress_marks.emplace(rank, mark);
  if (inserted || mark > it->second) {
    it->second = mark;
    entry->last_advance = clock_.steady_now();
    entry->stall_reported = false;
  }
}

void JobManager::on_result(const std::string& worker_id, const v1::JobResult& result) {
  WorkerEntry* worker = find_worker(worker_id);
  if (!worker) return;
  if (worker->job_id == result.job_id()) {
    worker->state = v1::IDLE;
    worker->job_id.clear();
    worker->rank = -1;
  }
  JobEntry* entry = find_job(result.job_id());
  // Only the rank's holder speaks for it: a result re-sent by a worker whose rank was lost
  // and replaced, or whose claim was refused, changes nothing.
  const bool holder = entry != nullptr && result.rank() >= 0 &&
                      result.rank() < entry->job.worker_ids_size() &&
                      entry->job.worker_ids(result.rank()) == worker_id;
  if (holder && result.attempt() == current_attempt(entry->job)) {
    if (result.rank() >= 0 && result.rank() < entry->job.ranks_size()) {
      v1::RankStatus* rank = entry->job.mutable_ranks(result.rank());
      rank->set_state(result.succeeded()                             ? v1::RANK_SUCCEEDED
                      : result.cause() == v1::RANK_FAILURE_CANCELLED ? v1::RANK_CANCELLED
                                                                     : v1::RANK_FAILED);
      if (!result.succeeded()) {
        rank->set_failure_cause(result.cause());
        rank->set_collective_cause(result.collective_cause());
        rank->set_named_rank(result.named_rank());
      }
      if (is_terminal(entry->job.state())) store_.save_ranks(entry->job);
    }
    if (entry->job.state() == v1::RUNNING && !result.succeeded()) {
      record_failure(*entry, *worker, result);
    } else if (entry->job.state() == v1::RUNNING) {
      entry->succeeded_ranks.insert(result.rank());
      if (result.rank() == 0) entry->job.set_result_json(result.result_json());
      if (static_cast<int>(entry->succeeded_ranks.size()) == entry->job.worker_ids_size()) {
        // When the last rank ended, which an outage may have put well before now.
        transition(*entry, v1::SUCCEEDED, "every rank finished", result.end_unix_time());
      }
    }
  }
  place();  // its worker is idle again
}

void JobManager::record_failure(JobEntry& entry, const WorkerEntry& worker,
                                const v1::JobResult& result) {
  // --check-collectives' verdict is the same on every rank: the first report records it.
  if (result.cause() == v1::RANK_FAILURE_DESYNC) {
    record_incident(entry, IncidentKind::kDesync, result.named_rank(), "desync: " + result.error());
  }
  const std::string reason = "rank " + std::to_string(result.rank()) + " (worker " +
                             worker.hello.worker_id() + ") failed: " + failure_text(result);
  // The rank's process is gone, and with it nothing but a replica of the survivors' state.
  const bool process_lost = result.cause() == v1::RANK_FAILURE_PROCESS_EXITED ||
                            result.cause() == v1::RANK_FAILURE_PROCESS_KILLED ||
                            result.cause() == v1::RANK_FAILURE_PROCESS_STOPPED;
  if (process_lost && try_heal(entry, result.rank(), worker.hello.worker_id(), reason)) return;
  fail_or_restart(entry, reason);
}

void JobManager::lost(const std::string& worker_id, const WorkerLink* link,
                      const std::string& reason) {
  WorkerEntry* worker = find_worker(worker_id);
  if (!worker || worker->link.get() != link) return;  // replaced by a newer session
  if (stopping_) return;
  worker->link.reset();
  const JobEntry* entry = worker->job_id.empty() ? nullptr : find_job(worker->job_id);
  if (entry && entry->job.state() == v1::RUNNING && worker->rank >= 0 &&
      worker->attempt == current_attempt(entry->job)) {
    // Its rank may well train on (protocol step 9): lost only once its job stops advancing.
    spdlog::warn("worker={} disconnected: {}; rank {} of {} is expected back", worker_id, reason,
                 worker->rank, worker->job_id);
    worker->state = v1::DISCONNECTED;
    worker->disconnected_since = clock_.steady_now();
    worker->disconnect_reason = reason;
    on_change_();
    return;
  }
  spdlog::warn("worker={} lost: {}", worker_id, reason);
  worker->state = v1::LOST;
  write_prometheus_targets();
  lose_rank_of(*worker, reason);
  place();  // pending jobs' reasons count this worker no more
  on_change_();
}

void JobManager::lose_rank_of(WorkerEntry& worker, const std::string& reason) {
  if (worker.job_id.empty()) return;
  if (JobEntry* entry = find_job(worker.job_id)) {
    const bool holder = worker.rank >= 0 && worker.rank < entry->job.worker_ids_size() &&
                        entry->job.worker_ids(worker.rank) == worker.hello.worker_id();
    if (holder && worker.attempt == current_attempt(entry->job) &&
        entry->job.state() == v1::RUNNING) {
      rank_lost(*entry, worker.rank, worker.hello.worker_id(),
                "worker " + worker.hello.worker_id() + " (rank " + std::to_string(worker.rank) +
                    ") lost: " + reason);
    }
  }
  worker.job_id.clear();
  worker.rank = -1;
}

void JobManager::rank_lost(JobEntry& entry, int rank, const std::string& worker_id,
                           const std::string& why) {
  if (rank >= 0 && rank < entry.job.ranks_size()) {
    entry.job.mutable_ranks(rank)->set_state(v1::RANK_LOST);
  }
  if (!try_heal(entry, rank, worker_id, why)) fail_or_restart(entry, why);
}

std::string JobManager::silence(const std::string& worker_id) const {
  auto it = workers_.find(worker_id);
  return it == workers_.end() ? "" : it->second->silence;
}

namespace {

// The history's first entry; a resume names the checkpoint it continues, read on this host where
// it can be ("submitted: resumes job-000001's checkpoint of step 4 (DIR/step-000004)").
std::string submitted_reason(const DdpJobOptions& ddp, const std::string& resumes_job_id) {
  if (ddp.resume.empty()) return "submitted";
  const std::string whose = resumes_job_id.empty() ? "" : resumes_job_id + "'s ";
  if (const auto facts = read_checkpoint_facts(ddp.resume, ddp.checkpoint_dir)) {
    return "submitted: resumes " + whose + "checkpoint of step " + std::to_string(facts->step) +
           " (" + facts->dir + ")";
  }
  if (ddp.resume == "auto" && resumes_job_id.empty()) return "submitted";
  return "submitted: resumes " + whose + "checkpoint " + ddp.resume +
         " (not readable on the coordinator's host: the ranks read it)";
}

}  // namespace

std::optional<Refusal> JobManager::submit(const v1::SubmitJobRequest& request,
                                          const DdpJobOptions& ddp, v1::Job* job) {
  if (!request.request_id().empty()) {
    // A retry of a submission whose reply was lost: the job it created, not a second one.
    const std::string created = store_.submission(request.request_id());
    if (const JobEntry* entry = created.empty() ? nullptr : find_job(created)) {
      *job = entry->job;
      return std::nullopt;
    }
  }
  int64_t pending = 0;
  for (const auto& [id, entry] : jobs_) pending += entry->job.state() == v1::PENDING;
  if (pending >= options_.max_pending_jobs) {
    return Refusal{
        Refusal::Code::kResourceExhausted,
        "max_pending_jobs: " + std::to_string(pending) + " jobs are already pending (limit " +
            std::to_string(options_.max_pending_jobs) + "); retry when some have started"};
  }
  JobEntry* resumed = nullptr;
  if (!request.resumes_job_id().empty() && !(resumed = find_job(request.resumes_job_id()))) {
    return Refusal{Refusal::Code::kNotFound, "resumes_job_id: no job " + request.resumes_job_id()};
  }
  auto owned = std::make_unique<JobEntry>();
  JobEntry& entry = *owned;
  entry.sequence = next_sequence_++;
  entry.submitted = clock_.steady_now();
  entry.job.set_job_id(job_id_for(entry.sequence));
  *entry.job.mutable_spec() = request.spec();
  entry.ddp = ddp;
  entry.job.set_state(v1::PENDING);
  v1::StateTransition t;
  t.set_state(v1::PENDING);
  t.set_unix_time(clock_.unix_seconds());
  t.set_reason(submitted_reason(ddp, resumed ? resumed->job.job_id() : ""));
  *entry.job.add_history() = t;
  *entry.events.emplace_back().mutable_transition() = t;
  store_.save_job(entry.job, entry.sequence);
  store_.add_transition(entry.job.job_id(), t);
  if (!request.request_id().empty())
    store_.save_submission(request.request_id(), entry.job.job_id());
  const std::string id = entry.job.job_id();
  job_order_.push_back(id);
  jobs_[id] = std::move(owned);
  if (resumed) {
    // Both histories name the link: this job's submission, and an event on the resumed one.
    record_incident(
        *resumed, IncidentKind::kResumed, -1,
        "resumed as " + id + " (world size " + std::to_string(request.spec().world_size()) + ")");
  }
  spdlog::info("job={} submitted (world size {})", id, request.spec().world_size());
  place();
  *job = entry.job;
  return std::nullopt;
}

std::optional<Refusal> JobManager::cancel(const std::string& job_id, v1::Job* job) {
  JobEntry* entry = find_job(job_id);
  if (!entry) return Refusal{Refusal::Code::kNotFound, "job_id: no job " + job_id};
  if (is_terminal(entry->job.state())) {
    return Refusal{Refusal::Code::kFailedPrecondition,
                   "job " + job_id + " is already " + v1::JobState_Name(entry->job.state())};
  }
  transition(*entry, v1::CANCELLED, "cancelled by request");
  cancel_workers(*entry);
  place();  // a job queued behind a cancelled pending one may start now
  *job = entry->job;
  return std::nullopt;
}

void JobManager::stop() {
  stopping_ = true;
  for (auto& [id, worker] : workers_) {
    if (worker->link) worker->link->disconnect();
  }
}

void JobManager::transition(JobEntry& entry, v1::JobState to, const std::string& reason,
                            double unix_time) {
  v1::Job& job = entry.job;
  if (!transition_allowed(job.state(), to)) {
    throw std::logic_error("job " + job.job_id() + ": transition " +
                           v1::JobState_Name(job.state()) + " -> " + v1::JobState_Name(to) +
                           " is not allowed");
  }
  v1::StateTransition t;
  t.set_state(to);
  t.set_unix_time(unix_time > 0 ? std::min(unix_time, clock_.unix_seconds())
                                : clock_.unix_seconds());
  t.set_reason(reason);
  job.set_state(to);
  // "waiting for…" describes a pending job only: a job cancelled while pending kept it in list
  // and show.
  if (to != v1::PENDING) job.clear_pending_reason();
  *job.add_history() = t;
  *entry.events.emplace_back().mutable_transition() = t;
  store_.save_job(job, entry.sequence);
  store_.add_transition(job.job_id(), t);
  if (is_terminal(to)) store_.save_ranks(job);
  spdlog::info("job={} state={} {}", job.job_id(), v1::JobState_Name(to), reason);
  on_change_();
}

void JobManager::record_incident(JobEntry& entry, IncidentKind kind, int rank,
                                 const std::string& message) {
  v1::Incident incident;
  incident.set_unix_time(clock_.unix_seconds());
  incident.set_kind(enum_name(kind));
  incident.set_rank(rank);
  incident.set_message(message);
  *entry.job.add_incidents() = incident;
  *entry.events.emplace_back().mutable_incident() = incident;
  store_.add_incident(entry.job.job_id(), incident);
  spdlog::warn("job={} {}", entry.job.job_id(), message);
  on_change_();
}

void JobManager::cancel_workers(JobEntry& entry) {
  for (const auto& id : entry.job.worker_ids()) {
    WorkerEntry* worker = find_worker(id);
    if (!worker || worker->job_id != entry.job.job_id() || !worker->link) continue;
    v1::CoordinatorMessage message;
    message.set_cancel_job_id(entry.job.job_id());
    worker->link->send(message);
  }
}

void JobManager::fail_or_restart(JobEntry& entry, const std::string& what_happened) {
  std::string reason = what_happened;
  if (entry.healing_since) {
    reason += " (during heal " + std::to_string(entry.job.group().generation()) +
              ": no second heal is tried)";
  }
  if (entry.job.state() == v1::RUNNING && may_restart(entry.job, entry.ddp)) {
    // The running attempt's ranks are told to stop; they return to IDLE as their (ignored)
    // results arrive, and place() starts the next attempt once enough workers are idle.
    entry.restart_reason = reason;
    entry.previous_world_size = entry.job.worker_ids_size();
    cancel_workers(entry);
    transition(entry, v1::PENDING, "restarting after: " + reason);
    place();
    return;
  }
  fail_job(entry, reason);
}

void JobManager::fail_job(JobEntry& entry, const std::string& reason) {
  if (is_terminal(entry.job.state())) return;
  entry.job.set_error(reason);
  transition(entry, v1::FAILED, reason);
  cancel_workers(entry);
}

void JobManager::list_workers(v1::ListWorkersReply* reply) const {
  for (const auto& id : worker_order_) {
    const WorkerEntry& w = *workers_.at(id);
    auto* info = reply->add_workers();
    *info->mutable_hello() = w.hello;
    info->set_state(w.state);
    info->set_job_id(w.job_id);
    info->set_last_seen_unix_time(w.last_seen);
  }
}

}  // namespace ddpd::coordinator
