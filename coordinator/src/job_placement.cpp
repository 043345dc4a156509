// JobManager's placement: which pending job starts on which idle workers (scheduling.h's FIFO
// rule, with backfill), the Assignment each rank gets, and the restart that a later attempt
// records.
#include <spdlog/spdlog.h>

#include "ddpd/api/restart_policy.h"
#include "ddpd/api/spec_convert.h"
#include "ddpd/common/fault_injection.h"
#include "job_manager.h"

namespace ddpd::coordinator {
namespace {

// The reason changes of one pending job that become events (what `watch` prints and replays);
// later changes update Job.pending_reason only, which show and list read. Unbounded, a queue
// whose head changed often recorded a change for every job behind it each time: 2,195 pending
// jobs under ddpd-fuzz took the coordinator to 1.26 GB in 15 s.
constexpr int kMaxPendingEvents = 32;

}  // namespace

void JobManager::place() {
  for (;;) {
    std::vector<PendingJob> pending;
    for (const auto& id : job_order_) {
      const JobEntry& entry = *jobs_[id];
      if (entry.job.state() != v1::PENDING) continue;
      pending.push_back({id, entry.job.spec().world_size(),
                         required_backend(entry.job.spec(), entry.ddp),
                         restart_fallback_sizes(entry.job, entry.ddp)});
    }
    std::vector<IdleWorker> idle, registered;
    for (const auto& id : worker_order_) {
      const WorkerEntry& w = *workers_[id];
      if (!w.link) continue;
      registered.push_back(
          {id, offered_backends({w.hello.backends().begin(), w.hello.backends().end()})});
      if (w.state == v1::IDLE) idle.push_back(registered.back());
    }
    auto placement = place_next(pending, idle, registered);
    if (!placement) {
      update_pending_reasons(pending, idle, registered);
      return;
    }
    start_attempt(*jobs_[placement->job_id], placement->worker_ids);
  }
}

void JobManager::update_pending_reasons(const std::vector<PendingJob>& pending,
                                        const std::vector<IdleWorker>& idle,
                                        const std::vector<IdleWorker>& registered) {
  for (size_t i = 0; i < pending.size(); ++i) {
    JobEntry& entry = *jobs_[pending[i].job_id];
    std::string reason = pending_reason(pending, i, registered, idle);
    if (reason == entry.job.pending_reason()) continue;
    if (entry.pending_events < kMaxPendingEvents) {
      ++entry.pending_events;
      auto* event = entry.events.emplace_back().mutable_pending();  // watchers print each change
      event->set_unix_time(clock_.unix_seconds());
      event->set_reason(reason);
    }
    entry.job.set_pending_reason(std::move(reason));
  }
}

void JobManager::start_attempt(JobEntry& entry, const std::vector<std::string>& worker_ids) {
  const int attempt = entry.job.attempts();
  const int world = static_cast<int>(worker_ids.size());
  const WorkerEntry& rank0 = *workers_[worker_ids.front()];
  v1::Assignment assignment;
  assignment.set_job_id(entry.job.job_id());
  *assignment.mutable_spec() = attempt > 0 ? next_attempt_spec(entry.job.spec()) : entry.job.spec();
  assignment.set_attempt(attempt);
  assignment.set_world_size(world);
  assignment.set_master_addr(rank0.hello.advertised_host());
  assignment.set_master_port(rank0.hello.rendezvous_port());
  entry.job.set_attempts(attempt + 1);
  entry.job.mutable_group()->Clear();
  entry.job.mutable_group()->set_job_id(entry.job.job_id());
  entry.job.mutable_group()->set_master_addr(assignment.master_addr());
  entry.job.mutable_group()->set_master_port(assignment.master_port());
  entry.job.mutable_group()->set_lost_rank(-1);
  entry.job.mutable_group()->set_world_size(world);
  entry.healing_since.reset();
  entry.job.clear_worker_ids();
  entry.job.clear_ranks();
  for (const auto& id : worker_ids) {
    auto* status = entry.job.add_ranks();
    status->set_rank(entry.job.worker_ids_size());
    status->set_worker_id(id);
    status->set_state(v1::RANK_RUNNING);
    entry.job.add_worker_ids(id);
  }
  entry.job.clear_pending_reason();
  entry.pending_events = 0;  // a restart waits afresh
  const bool ddp = entry.job.spec().has_ddp();
  entry.stragglers.reset();
  if (ddp) {
    entry.stragglers = std::make_unique<StragglerWatch>(world, entry.ddp.straggler_threshold);
  }
  entry.last_advance = clock_.steady_now();
  entry.progress_marks.clear();
  entry.stall_reported = false;
  entry.succeeded_ranks.clear();
  entry.partial_steps.clear();
  entry.last_step_stored.clear();
  if (attempt > 0 && ddp) {
    const DdpJobOptions& options = entry.ddp;
    record_incident(entry, IncidentKind::kRestart, -1,
                    restart_text({attempt, options.max_restarts, entry.restart_reason,
                                  entry.previous_world_size, world, options.checkpoint_dir,
                                  entry.last_checkpoint_step}));
  }
  std::string armed;  // the history says when a fault injection is armed
  if (attempt == 0 && ddp && !entry.job.spec().ddp().inject().empty()) {
    armed = "; fault injection armed: " +
            to_string(*parse_fault_injection(entry.job.spec().ddp().inject()));
  }
  transition(entry, v1::RUNNING,
             "placed on " + std::to_string(world) + " workers, rendezvous " +
                 assignment.master_addr() + ":" + std::to_string(assignment.master_port()) + armed);
  send_assignments(entry, assignment);
}

void JobManager::send_assignments(JobEntry& entry, const v1::Assignment& assignment) {
  for (int rank = 0; rank < entry.job.worker_ids_size(); ++rank) {
    WorkerEntry& worker = *workers_[entry.job.worker_ids(rank)];
    worker.state = v1::BUSY;
    worker.job_id = entry.job.job_id();
    worker.rank = rank;
    worker.attempt = assignment.attempt();
    worker.progress.reset();
    v1::CoordinatorMessage message;
    *message.mutable_assign() = assignment;
    message.mutable_assign()->set_rank(rank);
    worker.link->send(message);  // a dead session is noticed by its reader
  }
}

}  // namespace ddpd::coordinator
