// JobManager's healing (protocol step 8 in job_manager.h; docs/healing.md): a lost rank of a
// running replicated job is replaced by an idle worker, and the survivors go on without a
// restart.
#include <spdlog/spdlog.h>

#include "ddpd/api/restart_policy.h"
#include "job_manager.h"

namespace ddpd::coordinator {

JobManager::WorkerEntry* JobManager::spare_for(const JobEntry& entry,
                                               const std::string& lost_worker) {
  // Another idle worker first: the lost rank's own (its daemon lived, its rank process did not)
  // only when it is the one left.
  const Backend backend = required_backend(entry.job.spec(), entry.ddp);
  WorkerEntry* fallback = nullptr;
  for (const auto& id : worker_order_) {
    WorkerEntry& w = *workers_[id];
    if (w.state != v1::IDLE || !w.link) continue;
    const auto offered = offered_backends({w.hello.backends().begin(), w.hello.backends().end()});
    if (std::find(offered.begin(), offered.end(), backend) == offered.end()) continue;
    if (id != lost_worker) return &w;
    fallback = &w;
  }
  return fallback;
}

bool JobManager::try_heal(JobEntry& entry, int lost_rank, const std::string& lost_worker,
                          const std::string& reason) {
  v1::Job& job = entry.job;
  if (job.state() != v1::RUNNING || !may_heal(job, entry.ddp) || lost_rank < 0 ||
      lost_rank >= job.worker_ids_size()) {
    return false;
  }
  // A loss while a heal is under way: what was lost may be the state's source or the rank that
  // joins, and the ranks may be mid-transfer. The checkpoint restart is the path that is sure
  // (fail_or_restart says why).
  if (entry.healing_since) return false;
  // A survivor that already finished cannot form the new group: a rank whose daemon was cut off
  // trains on, and its peers may end the job before its loss is seen.
  if (!entry.succeeded_ranks.empty()) return false;
  WorkerEntry* spare = spare_for(entry, lost_worker);
  if (!spare) {
    if (!may_shrink_in_place(job, entry.ddp, lost_rank)) return false;
    shrink_in_place(entry, lost_rank, reason);
    return true;
  }
  entry.job.mutable_group()->set_generation(entry.job.group().generation() + 1);
  entry.job.mutable_group()->set_lost_rank(lost_rank);
  entry.last_step_stored.erase(lost_rank);  // the spare's steps are its own
  ++heals_started_;
  // The store outlives every rank but rank 0's process: lose rank 0, and the spare serves it.
  if (lost_rank == 0) {
    entry.job.mutable_group()->set_master_addr(spare->hello.advertised_host());
    entry.job.mutable_group()->set_master_port(spare->hello.rendezvous_port());
  }
  const std::string& spare_id = spare->hello.worker_id();
  job.set_worker_ids(lost_rank, spare_id);
  v1::RankStatus* status = job.mutable_ranks(lost_rank);
  status->Clear();
  status->set_rank(lost_rank);
  status->set_worker_id(spare_id);
  status->set_state(v1::RANK_RUNNING);
  entry.healing_since = clock_.steady_now();
  entry.last_advance = clock_.steady_now();
  entry.stall_reported = false;
  record_incident(entry, IncidentKind::kHeal, lost_rank,
                  "heal " + std::to_string(entry.job.group().generation()) + " after: " + reason +
                      "; worker " + spare_id + " takes rank " + std::to_string(lost_rank) +
                      " in group generation " + std::to_string(entry.job.group().generation()) +
                      " (store " + entry.job.group().master_addr() + ":" +
                      std::to_string(entry.job.group().master_port()) +
                      "), its state from a survivor");
  store_.save_job(job, entry.sequence);

  send_heal(entry, /*skipped_rank=*/lost_rank);

  const int attempt = current_attempt(job);
  v1::Assignment assignment;
  assignment.set_job_id(job.job_id());
  *assignment.mutable_spec() = attempt > 0 ? next_attempt_spec(job.spec()) : job.spec();
  assignment.set_rank(lost_rank);
  assignment.set_world_size(job.worker_ids_size());
  assignment.set_master_addr(entry.job.group().master_addr());
  assignment.set_master_port(entry.job.group().master_port());
  assignment.set_attempt(attempt);
  assignment.set_join_generation(entry.job.group().generation());
  spare->state = v1::BUSY;
  spare->job_id = job.job_id();
  spare->rank = lost_rank;
  spare->attempt = attempt;
  spare->progress.reset();
  v1::CoordinatorMessage message;
  *message.mutable_assign() = assignment;
  spare->link->send(message);
  on_change_();
  return true;
}

void JobManager::send_heal(const JobEntry& entry, int skipped_rank) {
  const v1::Job& job = entry.job;
  const v1::HealGroup& heal = job.group();
  for (int rank = 0; rank < job.worker_ids_size(); ++rank) {
    if (rank == skipped_rank) continue;
    WorkerEntry* survivor = find_worker(job.worker_ids(rank));
    if (!survivor || !survivor->link || survivor->job_id != job.job_id()) continue;
    v1::CoordinatorMessage message;
    *message.mutable_heal() = heal;
    survivor->link->send(message);
  }
}

void JobManager::shrink_in_place(JobEntry& entry, int lost_rank, const std::string& reason) {
  v1::Job& job = entry.job;
  entry.job.mutable_group()->set_generation(entry.job.group().generation() + 1);
  ++heals_started_;
  const int world = job.worker_ids_size() - 1;
  job.mutable_group()->set_lost_rank(lost_rank);
  job.mutable_group()->set_world_size(world);
  job.mutable_worker_ids()->erase(job.mutable_worker_ids()->begin() + lost_rank);
  job.mutable_ranks()->DeleteSubrange(lost_rank, 1);
  for (int rank = 0; rank < world; ++rank) {
    job.mutable_ranks(rank)->set_rank(rank);
    if (WorkerEntry* w = find_worker(job.worker_ids(rank))) w->rank = rank;
  }
  // The store lived in rank 0's process: lose it, and the new rank 0 serves the next one on its
  // worker's rendezvous port (connect_generation opens it where the endpoint changed).
  if (lost_rank == 0) {
    if (const WorkerEntry* first = find_worker(job.worker_ids(0))) {
      entry.job.mutable_group()->set_master_addr(first->hello.advertised_host());
      entry.job.mutable_group()->set_master_port(first->hello.rendezvous_port());
    }
  }
  // Keyed by the old numbers, and of steps the old group did not complete.
  entry.progress_marks.clear();
  entry.partial_steps.clear();
  std::map<int, int64_t> renumbered;  // each survivor's last step, under its new number
  for (const auto& [rank, step] : entry.last_step_stored) {
    if (rank != lost_rank) renumbered[rank > lost_rank ? rank - 1 : rank] = step;
  }
  entry.last_step_stored = std::move(renumbered);
  entry.healing_since = clock_.steady_now();
  entry.last_advance = clock_.steady_now();
  entry.stall_reported = false;
  record_incident(entry, IncidentKind::kHeal, lost_rank,
                  "heal " + std::to_string(entry.job.group().generation()) + " after: " + reason +
                      "; no idle worker replaces rank " + std::to_string(lost_rank) + ": the " +
                      std::to_string(world) + " survivors go on in group generation " +
                      std::to_string(entry.job.group().generation()) + ", those above rank " +
                      std::to_string(lost_rank) + " one number lower (store " +
                      entry.job.group().master_addr() + ":" +
                      std::to_string(entry.job.group().master_port()) +
                      "), each with a larger share of the same global batch");
  store_.save_job(job, entry.sequence);
  send_heal(entry, /*skipped_rank=*/-1);
  on_change_();
}

void JobManager::note_healed(JobEntry& entry, int64_t step) {
  if (!entry.healing_since) return;
  const double seconds =
      std::chrono::duration<double>(clock_.steady_now() - *entry.healing_since).count();
  entry.healing_since.reset();
  heal_seconds_.push_back(seconds);
  char text[160];
  std::snprintf(text, sizeof(text),
                "healed: group generation %d completed step %lld, %.2f s after the loss was seen",
                entry.job.group().generation(), static_cast<long long>(step), seconds);
  record_incident(entry, IncidentKind::kHealed, -1, text);
}

}  // namespace ddpd::coordinator
