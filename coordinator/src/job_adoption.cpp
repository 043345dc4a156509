// JobManager's sessions and adoption (protocol step 9 in job_manager.h; docs/protocols.md,
// "Adoption"): acknowledgements, claims of ranks that outlived a session or a coordinator,
// disconnected workers, and the jobs a restarted coordinator adopts.
#include <spdlog/spdlog.h>

#include <cstdio>

#include "ddpd/api/restart_policy.h"
#include "ddpd/api/spec_convert.h"
#include "job_manager.h"

namespace ddpd::coordinator {
void JobManager::restore_steps(JobEntry& entry, const std::vector<v1::StepReport>& stored) {
  const int attempt = current_attempt(entry.job);
  std::map<int64_t, std::vector<v1::StepReport>> by_step;
  for (const auto& s : stored) {
    if (s.attempt() != attempt) continue;
    by_step[s.step()].push_back(s);
    ++entry.step_reports;
    auto [it, inserted] = entry.last_step_stored.emplace(s.rank(), s.step());
    if (!inserted) it->second = std::max(it->second, s.step());
  }
  // Steps some ranks reported before the restart and the others will report after it.
  for (auto& [step, ranks] : by_step) {
    if (static_cast<int>(ranks.size()) < entry.job.worker_ids_size()) {
      entry.partial_steps[step] = std::move(ranks);
    }
  }
}

void JobManager::begin_adoption(JobEntry& entry) {
  v1::Job& job = entry.job;
  job.clear_ranks();  // stored once a job ends; a running one's are rebuilt from its workers
  for (int rank = 0; rank < job.worker_ids_size(); ++rank) {
    auto* status = job.add_ranks();
    status->set_rank(rank);
    status->set_worker_id(job.worker_ids(rank));
    status->set_state(v1::RANK_RUNNING);
  }
  // A heal the old coordinator started and never saw complete (a `heal` incident with no
  // `healed` after it) is still under way: another loss restarts the job (protocol step 8).
  int last_heal = -1, last_healed = -1;
  for (int i = 0; i < job.incidents_size(); ++i) {
    if (job.incidents(i).kind() == enum_name(IncidentKind::kHeal)) last_heal = i;
    if (job.incidents(i).kind() == enum_name(IncidentKind::kHealed)) last_healed = i;
  }
  if (last_heal > last_healed) entry.healing_since = clock_.steady_now();
  entry.adopt_deadline = clock_.steady_now() + options_.adopt_timeout;
  entry.adopt_started = clock_.unix_seconds();
  entry.last_advance = clock_.steady_now();
  if (job.spec().has_ddp()) {
    entry.stragglers =
        std::make_unique<StragglerWatch>(job.worker_ids_size(), entry.ddp.straggler_threshold);
  }
  spdlog::info("job={} adopting: waiting up to {:.0f} s (--adopt-timeout) for its {} ranks",
               job.job_id(), to_seconds(options_.adopt_timeout), job.worker_ids_size());
}

void JobManager::claim(WorkerEntry& worker, const v1::RankClaim& claim) {
  JobEntry* entry = find_job(claim.job_id());
  const std::string& id = worker.hello.worker_id();
  if (!entry) return refuse_claim(worker, claim, "no such job");
  const v1::Job& job = entry->job;
  if (job.state() != v1::RUNNING) {
    return refuse_claim(worker, claim, "the job is " + v1::JobState_Name(job.state()));
  }
  if (claim.attempt() != current_attempt(job)) {
    return refuse_claim(worker, claim,
                        "the job runs attempt " + std::to_string(current_attempt(job)));
  }
  if (claim.rank() < 0 || claim.rank() >= job.worker_ids_size()) {
    return refuse_claim(worker, claim,
                        "the job has " + std::to_string(job.worker_ids_size()) + " ranks");
  }
  if (job.worker_ids(claim.rank()) != id) {
    return refuse_claim(worker, claim, "worker " + job.worker_ids(claim.rank()) + " holds it");
  }
  worker.state = v1::BUSY;
  worker.job_id = claim.job_id();
  worker.rank = claim.rank();
  worker.attempt = claim.attempt();
  if (claim.generation() < job.group().generation()) {
    // A heal this worker's session missed: its rank waits for this group.
    v1::CoordinatorMessage heal;
    *heal.mutable_heal() = job.group();
    worker.link->send(heal);
  }
  const double lost_at = claim.session_lost_unix_time();
  if (lost_at > 0 &&
      (entry->earliest_session_lost == 0 || lost_at < entry->earliest_session_lost)) {
    entry->earliest_session_lost = lost_at;
  }
  if (entry->adopt_deadline) {
    entry->claimed_ranks.insert(claim.rank());
    if (static_cast<int>(entry->claimed_ranks.size()) == job.worker_ids_size()) {
      finish_adoption(*entry);
    }
    return;
  }
  // A live coordinator: the worker's session ended and it came back while its rank trained on.
  char text[200];
  std::snprintf(text, sizeof(text),
                "adopted: worker %s claimed rank %d again %.1f s after its session ended; the "
                "rank trained on (last step %lld)",
                id.c_str(), claim.rank(), std::max(0.0, clock_.unix_seconds() - lost_at),
                static_cast<long long>(claim.last_step()));
  record_incident(*entry, IncidentKind::kAdopted, claim.rank(), text);
}

void JobManager::refuse_claim(WorkerEntry& worker, const v1::RankClaim& claim,
                              const std::string& why) {
  spdlog::warn("worker={} claims rank {} of {} (attempt {}): refused, {}; its rank is stopped",
               worker.hello.worker_id(), claim.rank(), claim.job_id(), claim.attempt(), why);
  // Busy on the refused job until its (cancelled) result comes: no assignment meanwhile, and
  // the result speaks for no rank (on_result's holder check).
  worker.state = v1::BUSY;
  worker.job_id = claim.job_id();
  worker.rank = -1;
  worker.attempt = claim.attempt();
  if (claim.process_state() == v1::RANK_PROCESS_ENDED) {
    worker.state = v1::IDLE;  // nothing to stop: its result will change nothing
    worker.job_id.clear();
  }
  v1::CoordinatorMessage cancel;
  cancel.set_cancel_job_id(claim.job_id());
  worker.link->send(cancel);
}

void JobManager::finish_adoption(JobEntry& entry) {
  const double now = clock_.unix_seconds();
  const double outage = entry.earliest_session_lost > 0 ? now - entry.earliest_session_lost
                                                        : now - entry.adopt_started;
  char text[240];
  std::snprintf(text, sizeof(text),
                "adopted: all %d ranks claimed %.1f s after this coordinator started; their "
                "sessions were down %.1f s; no rank restarted",
                entry.job.worker_ids_size(), now - entry.adopt_started, outage);
  entry.adopt_deadline.reset();
  entry.claimed_ranks.clear();
  // The outage is no stall: the clocks start now.
  entry.last_advance = clock_.steady_now();
  entry.stall_reported = false;
  record_incident(entry, IncidentKind::kAdopted, -1, text);
}

void JobManager::check_adoptions(LifecycleClock::TimePoint now) {
  for (const auto& id : job_order_) {
    JobEntry& entry = *jobs_[id];
    if (!entry.adopt_deadline || now < *entry.adopt_deadline) continue;
    entry.adopt_deadline.reset();
    if (entry.job.state() != v1::RUNNING) continue;
    std::vector<int> unclaimed;
    for (int rank = 0; rank < entry.job.worker_ids_size(); ++rank) {
      if (!entry.claimed_ranks.count(rank)) unclaimed.push_back(rank);
    }
    entry.claimed_ranks.clear();
    const std::string when = " not claimed within --adopt-timeout " +
                             std::to_string(options_.adopt_timeout.count() / 1000) +
                             " s of the coordinator's restart";
    if (unclaimed.size() == 1) {
      const int rank = unclaimed.front();
      rank_lost(
          entry, rank, entry.job.worker_ids(rank),
          "rank " + std::to_string(rank) + " (worker " + entry.job.worker_ids(rank) + ")" + when);
    } else {
      std::string ranks;
      for (int r : unclaimed) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
      fail_or_restart(entry, "ranks " + ranks + when);
    }
  }
}

void JobManager::check_disconnected(LifecycleClock::TimePoint now) {
  for (auto& [id, worker] : workers_) {
    if (worker->state != v1::DISCONNECTED) continue;
    JobEntry* entry = find_job(worker->job_id);
    const bool running = entry && entry->job.state() == v1::RUNNING &&
                         worker->attempt == current_attempt(entry->job);
    double quiet = 0;  // seconds the job has not advanced
    if (running) {
      // Its peers' collectives complete only with its rank: while the job advances, it lives,
      // and a job that stopped advancing --worker-timeout ago (a daemon stopped, its rank
      // blocked on its pipe) needs no second wait. A job of one rank has no peers to say so,
      // nor has one whose other ranks have finished (its rank most likely has too, its result
      // behind the cut): it waits --adopt-timeout from the disconnection.
      const bool peers = entry->job.worker_ids_size() > 1 && entry->succeeded_ranks.empty();
      const auto quiet_since =
          peers ? entry->last_advance : std::max(worker->disconnected_since, entry->last_advance);
      quiet = to_seconds(now - quiet_since);
      if (now - quiet_since < (peers ? options_.worker_timeout : options_.adopt_timeout)) continue;
    }
    char why[80];
    std::snprintf(why, sizeof(why), ", and its job has not advanced for %.1f s", quiet);
    spdlog::warn("worker={} lost: {}", id, worker->disconnect_reason);
    worker->state = v1::LOST;
    lose_rank_of(*worker, worker->disconnect_reason + (running ? why : ""));
    write_prometheus_targets();
    place();
    on_change_();
  }
}

void JobManager::forgive_own_pause(LifecycleClock::TimePoint now) {
  const auto gap = last_tick_ ? now - *last_tick_ : LifecycleClock::TimePoint::duration{};
  last_tick_ = now;
  if (options_.own_pause.count() <= 0 || gap <= options_.own_pause) return;
  spdlog::warn(
      "the coordinator did not run for {:.1f} s (stopped or paused): the workers' and "
      "jobs' clocks move on by as much",
      to_seconds(gap));
  for (auto& [id, worker] : workers_) {
    worker->last_heartbeat += gap;
    worker->disconnected_since += gap;
  }
  for (auto& [id, entry] : jobs_) {
    entry->last_advance += gap;
    if (entry->adopt_deadline) *entry->adopt_deadline += gap;
  }
}

void JobManager::note_sequence(WorkerEntry& worker, const v1::WorkerMessage& message) {
  worker.received_seq = std::max<uint64_t>(worker.received_seq, message.seq());
  if (message.reports_dropped() <= worker.reports_dropped) return;
  const int64_t more = message.reports_dropped() - worker.reports_dropped;
  worker.reports_dropped = message.reports_dropped();
  if (JobEntry* entry = find_job(message.job_id())) {
    record_incident(*entry, IncidentKind::kLimit, worker.rank,
                    "worker " + worker.hello.worker_id() + " dropped " + std::to_string(more) +
                        " step reports: its --report-buffer-mb was full while it had no session");
  }
}

void JobManager::acknowledge_stored() {
  if (!store_.steps_committed()) return;
  for (auto& [id, worker] : workers_) {
    if (!worker->link || worker->received_seq <= worker->acknowledged_seq) continue;
    v1::CoordinatorMessage ack;
    ack.set_acknowledged(worker->received_seq);
    worker->link->send(ack);
    worker->acknowledged_seq = worker->received_seq;
  }
}

}  // namespace ddpd::coordinator
