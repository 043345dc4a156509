// JobManager's watch over running jobs: step reports aggregated once every rank reported a step
// (with the straggler watch), and the periodic checks of tick(): silent workers, jobs pending too
// long, stalls.
#include <spdlog/spdlog.h>

#include <cstdio>

#include "ddpd/api/restart_policy.h"
#include "ddpd/api/spec_convert.h"
#include "ddpd/common/stall_analysis.h"
#include "job_manager.h"
#include "prometheus_targets.h"

namespace ddpd::coordinator {
void JobManager::on_step(const std::string& job_id, const v1::StepReport& step) {
  JobEntry* entry = find_job(job_id);
  if (!entry || entry->job.state() != v1::RUNNING ||
      step.attempt() != current_attempt(entry->job)) {
    return;
  }
  // A report sent again after a lost acknowledgement (protocol step 9) is stored once.
  auto [last, first_of_rank] = entry->last_step_stored.emplace(step.rank(), step.step());
  if (!first_of_rank && step.step() <= last->second) return;
  last->second = step.step();
  entry->last_advance = clock_.steady_now();
  entry->stall_reported = false;
  if (++entry->step_reports > options_.max_step_reports_per_job) {
    if (entry->step_reports == options_.max_step_reports_per_job + 1) {
      record_incident(
          *entry, IncidentKind::kLimit, step.rank(),
          "max_step_reports_per_job: " + std::to_string(options_.max_step_reports_per_job) +
              " step reports stored; later ones are dropped");
    }
    return;
  }
  store_.add_step(job_id, step);
  // A rank's step in diagnose is the later of its last heartbeat's and its last report's: step
  // reports outrun heartbeats, and an ended job showed the last heartbeat's (21 of 42).
  if (step.rank() >= 0 && step.rank() < entry->job.ranks_size()) {
    auto* progress = entry->job.mutable_ranks(step.rank())->mutable_progress();
    progress->set_step(std::max(progress->step(), step.step()));
  }
  auto& ranks = entry->partial_steps[step.step()];
  ranks.push_back(step);
  if (static_cast<int>(ranks.size()) == entry->job.worker_ids_size()) {
    note_healed(*entry, step.step());
    aggregate_complete_step(*entry, ranks);
    entry->partial_steps.erase(step.step());
  }
}

void JobManager::aggregate_complete_step(JobEntry& entry,
                                         const std::vector<v1::StepReport>& ranks) {
  const int64_t step = ranks.front().step();
  if (entry.stragglers) {
    // Compute: the step less the time the rank was blocked on communication.
    std::vector<double> compute(ranks.size(), 0.0);
    for (const auto& r : ranks) {
      if (r.rank() >= 0 && r.rank() < static_cast<int>(compute.size())) {
        compute[r.rank()] = r.step_seconds() - r.exposed_comm_seconds();
      }
    }
    for (const auto& finding : entry.stragglers->add_step(step, compute)) {
      record_incident(entry, IncidentKind::kStraggler, finding.rank, finding.message);
    }
  }
  for (const auto& r : ranks) {
    if (r.checkpoint_seconds() > 0) entry.last_checkpoint_step = step + 1;
  }
  auto& event = entry.events.emplace_back();
  if (entry.stragglers) {
    const auto& scores = entry.stragglers->scores();
    for (int r = 0; r < static_cast<int>(scores.size()); ++r) {
      event.add_compute_scores(scores[r]);
      if (r < entry.job.ranks_size()) entry.job.mutable_ranks(r)->set_compute_score(scores[r]);
    }
  }
  *event.mutable_step() = aggregate_step(ranks);
  event.set_total_steps(entry.job.spec().has_ddp() ? entry.ddp.steps : 0);
  on_change_();
}

void JobManager::tick() {
  store_.flush_steps_older_than(std::chrono::milliseconds(250));
  acknowledge_stored();
  const auto now = clock_.steady_now();
  forgive_own_pause(now);
  check_adoptions(now);
  check_disconnected(now);
  check_heartbeats(now);
  check_pending_timeouts(now);
  for (const auto& id : job_order_) check_stall(*jobs_[id], now);
}

void JobManager::check_heartbeats(LifecycleClock::TimePoint now) {
  for (auto& [id, worker] : workers_) {
    if (!worker->link || !worker->silence.empty() ||
        now - worker->last_heartbeat <= options_.worker_timeout) {
      continue;
    }
    char text[120];
    std::snprintf(text, sizeof(text),
                  "no heartbeat for %.1f s (--worker-timeout %.1f s): the worker is stopped, "
                  "hung or cut off",
                  to_seconds(now - worker->last_heartbeat), to_seconds(options_.worker_timeout));
    worker->silence = text;
    worker->link->disconnect();  // its reader then reports it lost
  }
}

void JobManager::check_pending_timeouts(LifecycleClock::TimePoint now) {
  if (options_.pending_timeout.count() <= 0) return;
  bool failed = false;
  for (const auto& id : job_order_) {
    JobEntry& entry = *jobs_[id];
    if (entry.job.state() != v1::PENDING || now - entry.submitted <= options_.pending_timeout) {
      continue;
    }
    int idle = 0;
    for (auto& [wid, w] : workers_) idle += w->state == v1::IDLE && w->link;
    fail_job(entry, "waited " + std::to_string(options_.pending_timeout.count() / 1000) +
                        " s for " + std::to_string(entry.job.spec().world_size()) +
                        " idle workers offering " +
                        enum_name(required_backend(entry.job.spec(), entry.ddp)) + "; " +
                        std::to_string(idle) + " idle");
    failed = true;
  }
  if (failed) place();  // the jobs queued behind them may start
}

void JobManager::check_stall(JobEntry& entry, LifecycleClock::TimePoint now) {
  if (entry.job.state() != v1::RUNNING || !entry.job.spec().has_ddp() || entry.stall_reported) {
    return;
  }
  const DdpJobOptions& job = entry.ddp;
  const double stalled = to_seconds(now - entry.last_advance);
  if (job.stall_seconds <= 0 || stalled < job.stall_seconds) return;
  std::vector<RankReport> ranks;
  for (int rank = 0; rank < entry.job.worker_ids_size(); ++rank) {
    RankReport report{rank, std::nullopt};
    const WorkerEntry* worker = find_worker(entry.job.worker_ids(rank));
    if (worker && worker->job_id == entry.job.job_id() && worker->progress) {
      report.position = from_proto(*worker->progress);
    }
    ranks.push_back(std::move(report));
  }
  const StallFinding finding = analyze_stall(ranks, stalled);
  entry.stall_reported = true;
  record_incident(entry, finding.kind, finding.rank, finding.message);
  if (job.on_stall == OnStall::kFail) fail_or_restart(entry, finding.message);
}

void JobManager::write_prometheus_targets() const {
  if (options_.prometheus_targets.empty()) return;
  std::vector<ScrapeTarget> targets;
  for (const auto& id : worker_order_) {
    const WorkerEntry& worker = *workers_.at(id);
    // A disconnected worker's /metrics still serves its rank: scraped through the outage.
    const bool alive = worker.link || worker.state == v1::DISCONNECTED;
    if (!alive || worker.hello.metrics_port() <= 0) continue;
    targets.push_back({id, worker.hello.advertised_host(), worker.hello.metrics_port()});
  }
  if (!coordinator::write_prometheus_targets(options_.prometheus_targets, targets)) {
    spdlog::warn("cannot write --prometheus-targets {}", options_.prometheus_targets);
  }
}

StateCounts JobManager::state_counts() const {
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
  counts.heals_started = heals_started_;
  counts.heal_seconds = heal_seconds_;
  return counts;
}

}  // namespace ddpd::coordinator
