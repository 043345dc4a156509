// The job lifecycle, with no gRPC in it: the worker and job tables, placement, results, losses,
// restarts, the stall watch and straggler aggregation, all persisted in a JobStore. The gRPC
// service (coordinator_service.h) authenticates and validates requests, holds the lock and
// plumbs streams; everything it decides about jobs and workers, it asks of this class.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "coordinator_options.h"
#include "ddpd/common/incident_kind.h"
#include "ddpd/common/job_options.h"
#include "ddpd/v1/ddpd.pb.h"
#include "job_store.h"
#include "lifecycle_clock.h"
#include "scheduling.h"
#include "state_counts.h"
#include "straggler_watch.h"

namespace ddpd::coordinator {

// One worker's session as the lifecycle sees it; the service implements it with a SessionOutbox.
class WorkerLink {
 public:
  virtual ~WorkerLink() = default;
  // Queues `message`, never waiting on the worker. A dead session is noticed by its reader, which
  // then reports the loss (JobManager::lost).
  virtual void send(const v1::CoordinatorMessage& message) = 0;
  // Ends the session; its reader then reports the loss.
  virtual void disconnect() = 0;
};

// Why a request was refused; the service maps the code to its gRPC status.
struct Refusal {
  enum class Code {
    kNotFound,
    kAlreadyExists,
    kResourceExhausted,
    kFailedPrecondition,
    kUnavailable
  };
  Code code;
  std::string message;  // names the API field, as every refusal of the API does
};

// Protocol (job lifecycle):
//  1. submit() stores a (validated) spec PENDING.
//  2. place(): the oldest PENDING job starts once world_size workers are idle: ranks go in
//     registration order; rank 0's advertised host and rendezvous port form the TCPStore
//     endpoint; each worker gets an Assignment on its link; the job is RUNNING.
//  3. Workers stream StepReports (stored per rank; aggregated per step once every rank reported
//     it) and finally a JobResult; the job is SUCCEEDED when every rank succeeded, FAILED at the
//     first failure (the other ranks are told to cancel).
//  4. A worker whose session ends (lost()), or that misses heartbeats for worker_timeout (tick()
//     disconnects it, and its reader reports the loss), is lost: its job FAILS with the reason
//     and the other ranks are cancelled; each returns to IDLE when it reports its (cancelled)
//     result.
//  5. cancel() marks the job CANCELLED and sends cancel to its workers.
//  6. Stall watch (DDP jobs): every heartbeat carries the rank's progress (phase, step, its
//     collective journal's last enqueued/completed sequence numbers and oldest pending
//     collective). When no rank has completed a collective or a step for --stall-seconds, tick()
//     records an incident naming the waiting ranks, the collective they wait in and the ranks
//     that have not joined it (or a desync), once per stall; --on-stall fail then fails the job
//     with that text and cancels its ranks.
//  7. Restarts (DDP jobs with --max-restarts N; restart_policy.h): a lost worker, a failed rank
//     or a stall under --on-stall fail sends the job back to PENDING instead of FAILED, while
//     fewer than N restarts were made; its ranks are cancelled. Each Assignment carries the
//     attempt number, echoed in step reports and results, so reports of a cancelled attempt are
//     ignored. The next attempt runs with --resume auto, at the job's world size, or at the
//     largest size down to --min-world-size that idle workers and the global batch allow; a
//     `restart` incident records why, the world sizes and the checkpoint step.
//  8. Healing (job_healing.cpp, docs/healing.md): before 7, a rank lost by the running attempt
//     (its process exited, was killed or stopped, or its worker was lost) of a job may_heal()
//     allows is replaced in place when an idle worker offers the job's backend: the job stays
//     RUNNING; its survivors get a HealGroup (the next group generation, and the store it
//     forms over: the same unless rank 0 was lost, then the spare's); the spare gets the lost
//     rank's number in an Assignment with join_generation; a `heal` incident records who
//     replaced whom, and a `healed` incident the first step the ranks complete after it. With
//     no spare, a job that may_shrink_in_place() shrinks instead: the lost rank's entries go,
//     the survivors above it are renumbered one lower (worker_ids, ranks, each worker's rank),
//     and their HealGroup carries the smaller world size (and, where rank 0 was lost, the new
//     rank 0's rendezvous endpoint for the store). Otherwise 7 applies; so it does to a
//     loss or failure while a heal is under way (before its `healed` incident), and the
//     restart's reason says so.
//  9. Sessions and adoption (job_adoption.cpp; docs/protocols.md, "Adoption"). Steps and
//     results carry the daemon's sequence number; tick() acknowledges, per worker, the highest
//     one received once the store has committed every step report (JobStore::steps_committed),
//     and the daemon forgets what is acknowledged. A re-sent step (job, attempt, rank, step) or
//     result is stored once. A session that ends while its worker runs a rank of the running
//     attempt leaves the worker DISCONNECTED, not lost: its rank is lost only once its job has
//     not advanced for --worker-timeout (the data plane is the evidence it lives; a job of one
//     rank has none, and waits --adopt-timeout). A daemon registering again claims its
//     rank (hello.claim): accepted when the job is RUNNING in that attempt and the rank is the
//     worker's; refused otherwise (unknown or ended job, another attempt, a rank another worker
//     holds), and a refused claim's rank is cancelled. A worker whose group generation is behind
//     the job's gets the job's HealGroup again (a heal its session missed).
// On construction, jobs found RUNNING in the store stay RUNNING, adopting: their ranks' claims
// are awaited for --adopt-timeout, the stall and worker clocks start at adoption, and an
// `adopted` incident names the outage once every rank is claimed; a rank not claimed in time is
// lost as in 4. With --no-adopt they are restarted as in 7 when restarts are left, else marked
// FAILED ("coordinator restarted").
//
// Thread contract: none of its own, and not thread-safe: the service calls every method under
// its one mutex. Links are only queued to (WorkerLink::send never blocks), and `on_change` is
// called under that mutex too (the service notifies its watchers from it).
// Errors: the JobStore's std::runtime_error passes through (the service answers INTERNAL).
class JobManager {
 public:
  JobManager(const CoordinatorOptions& options, JobStore& store, const LifecycleClock& clock,
             std::function<void()> on_change);

  // Workers.
  std::optional<Refusal> register_worker(const v1::WorkerHello& hello,
                                         std::shared_ptr<WorkerLink> link);
  // Any message of a registered worker's session: a heartbeat (with the rank's progress), a
  // step report or a result.
  void on_message(const std::string& worker_id, const v1::WorkerMessage& message);
  void on_progress(const std::string& worker_id, const std::string& job_id,
                   const v1::RankProgress& progress);
  void on_step(const std::string& job_id, const v1::StepReport& step);
  void on_result(const std::string& worker_id, const v1::JobResult& result);
  // The session behind `link` ended; ignored when the worker has registered again since.
  void lost(const std::string& worker_id, const WorkerLink* link, const std::string& reason);
  // Why tick() ended the worker's session (empty: it did not), so the loss names the silence
  // rather than the broken connection it caused.
  std::string silence(const std::string& worker_id) const;

  // Jobs. `request.spec` must have passed validate_spec, which decoded `ddp` from it.
  std::optional<Refusal> submit(const v1::SubmitJobRequest& request, const DdpJobOptions& ddp,
                                v1::Job* job);
  // The steps a job runs in all (0: a comm job, or no such job): what watchers' events carry.
  int64_t total_steps(const std::string& job_id) const;
  std::optional<Refusal> cancel(const std::string& job_id, v1::Job* job);

  // The periodic checks, at the clock's time: heartbeat timeouts, --pending-timeout, stalls,
  // and the store's step batch. The service's reaper calls it twice a second.
  void tick();
  // Disconnects every worker; from then on losses change no job (running jobs stay RUNNING in
  // the store, so the next start says "coordinator restarted" rather than blaming a worker).
  void stop();
  bool stopping() const { return stopping_; }

  // Reads.
  const v1::Job* job(const std::string& job_id) const;
  // What WatchJob replays and follows: transitions, incidents and complete steps, in order.
  const std::vector<v1::JobEvent>* events(const std::string& job_id) const;
  const std::vector<std::string>& job_order() const { return job_order_; }
  std::vector<v1::StepReport> steps(const std::string& job_id) { return store_.load_steps(job_id); }
  void list_workers(v1::ListWorkersReply* reply) const;
  StateCounts state_counts() const;

 private:
  struct WorkerEntry {
    v1::WorkerHello hello;
    v1::WorkerState state = v1::IDLE;
    std::string job_id;
    int rank = -1;
    int attempt = 0;  // of job_id, that this worker runs
    double last_seen = 0;
    LifecycleClock::TimePoint last_heartbeat;
    std::shared_ptr<WorkerLink> link;          // null once the session ended
    std::optional<v1::RankProgress> progress;  // the last heartbeat's, for job_id
    std::string silence;                       // set by tick() when it ends a silent session
    // Sessions (protocol step 9): the highest sequence number received and acknowledged, and
    // while DISCONNECTED, since when and why.
    uint64_t received_seq = 0;
    uint64_t acknowledged_seq = 0;
    int64_t reports_dropped = 0;  // as the daemon last reported it
    LifecycleClock::TimePoint disconnected_since;
    std::string disconnect_reason;
  };

  struct JobEntry {
    v1::Job job;
    // job.spec()'s DDP options, decoded once (at submit, or when the store is loaded); a comm
    // job's are the defaults and unused. The stored spec never changes after submit.
    DdpJobOptions ddp;
    int64_t sequence = 0;
    LifecycleClock::TimePoint submitted;
    std::map<int64_t, std::vector<v1::StepReport>> partial_steps;  // until every rank reported
    std::set<int> succeeded_ranks;
    std::vector<v1::JobEvent> events;  // what WatchJob replays and follows
    // Stall watch (DDP jobs): when any rank last completed a collective or a step, and each
    // rank's (last completed sequence number, step) at that time.
    LifecycleClock::TimePoint last_advance;
    std::map<int, std::pair<int64_t, int64_t>> progress_marks;
    bool stall_reported = false;  // this stall episode has its incident
    // Restarts: why the running attempt ended, its world size, and the last step after which
    // every rank reported a checkpoint (0: none), which the next attempt resumes from.
    std::string restart_reason;
    int previous_world_size = 0;
    int64_t last_checkpoint_step = 0;
    std::unique_ptr<StragglerWatch> stragglers;  // DDP jobs, from RUNNING on
    int64_t step_reports = 0;                    // received (stored up to max_step_reports_per_job)
    int pending_events = 0;  // reason changes recorded as events (kMaxPendingEvents at most)
    // Healing (the group is job.group): until the healed group completes a step, when the loss
    // it healed was seen.
    std::optional<LifecycleClock::TimePoint> healing_since;
    // Each rank's last step stored in this attempt: a re-sent report at or below it is a copy.
    std::map<int, int64_t> last_step_stored;
    // Adoption after a restart: until when claims are awaited, and the ranks claimed so far.
    std::optional<LifecycleClock::TimePoint> adopt_deadline;
    std::set<int> claimed_ranks;
    double earliest_session_lost = 0;  // unix; the claims' earliest, for the outage's length
    double adopt_started = 0;          // unix; when this coordinator started adopting
  };

  void recover();
  // Adoption and sessions (job_adoption.cpp).
  void begin_adoption(JobEntry& job);
  void restore_steps(JobEntry& job, const std::vector<v1::StepReport>& stored);
  // Handles hello.claim for a worker just registered; the worker is BUSY on it or refused.
  void claim(WorkerEntry& worker, const v1::RankClaim& claim);
  void refuse_claim(WorkerEntry& worker, const v1::RankClaim& claim, const std::string& why);
  void finish_adoption(JobEntry& job);
  void check_adoptions(LifecycleClock::TimePoint now);
  // Moves every clock the checks read on by a pause of the coordinator's own (own_pause).
  void forgive_own_pause(LifecycleClock::TimePoint now);
  void check_disconnected(LifecycleClock::TimePoint now);
  void acknowledge_stored();
  void note_sequence(WorkerEntry& worker, const v1::WorkerMessage& message);
  // The worker's rank, if it holds one of a running attempt, is lost for `reason`; the worker
  // holds none after.
  void lose_rank_of(WorkerEntry& worker, const std::string& reason);
  // A rank of the running attempt is gone: heal it where the job may, else fail or restart.
  void rank_lost(JobEntry& job, int rank, const std::string& worker_id, const std::string& why);
  WorkerEntry* find_worker(const std::string& worker_id);
  JobEntry* find_job(const std::string& job_id);
  // `unix_time`: when it happened, where that was before now (a job that ended during an outage);
  // 0: now.
  void transition(JobEntry& job, v1::JobState to, const std::string& reason, double unix_time = 0);
  void record_incident(JobEntry& job, IncidentKind kind, int rank, const std::string& message);
  // Placement (job_placement.cpp).
  void place();
  void start_attempt(JobEntry& job, const std::vector<std::string>& worker_ids);
  void send_assignments(JobEntry& job, const v1::Assignment& assignment);
  void update_pending_reasons(const std::vector<PendingJob>& pending,
                              const std::vector<IdleWorker>& idle,
                              const std::vector<IdleWorker>& registered);
  // Endings.
  void fail_job(JobEntry& job, const std::string& reason);
  // A DDP job with restarts left goes back to PENDING (its ranks cancelled) to resume from its
  // latest checkpoint; any other job FAILS.
  void fail_or_restart(JobEntry& job, const std::string& reason);
  void cancel_workers(JobEntry& job);
  // Healing (job_healing.cpp): replaces `lost_rank`, whose worker was `lost_worker`, with an idle
  // worker; false (nothing changed) when the job may not heal or no worker is idle.
  bool try_heal(JobEntry& job, int lost_rank, const std::string& lost_worker,
                const std::string& reason);
  WorkerEntry* spare_for(const JobEntry& job, const std::string& lost_worker);
  // Step 8 without a spare: the survivors go on one rank fewer, renumbered.
  void shrink_in_place(JobEntry& job, int lost_rank, const std::string& reason);
  // Step 8's HealGroup (job.group), for the job's current worker_ids, to every connected rank
  // but `skipped_rank` (the lost one; -1 where the ranks were renumbered without it already).
  void send_heal(const JobEntry& job, int skipped_rank);
  void note_healed(JobEntry& job, int64_t step);
  void record_failure(JobEntry& job, const WorkerEntry& worker, const v1::JobResult& result);
  // Monitoring (job_monitor.cpp).
  void aggregate_complete_step(JobEntry& job, const std::vector<v1::StepReport>& ranks);
  void check_stall(JobEntry& job, LifecycleClock::TimePoint now);
  void check_heartbeats(LifecycleClock::TimePoint now);
  void check_pending_timeouts(LifecycleClock::TimePoint now);
  void write_prometheus_targets() const;

  const CoordinatorOptions& options_;
  JobStore& store_;
  const LifecycleClock& clock_;
  std::function<void()> on_change_;
  std::map<std::string, std::unique_ptr<WorkerEntry>> workers_;
  std::vector<std::string> worker_order_;  // registration order, for rank assignment
  std::map<std::string, std::unique_ptr<JobEntry>> jobs_;
  std::vector<std::string> job_order_;  // submission order
  int64_t next_sequence_ = 1;
  bool stopping_ = false;
  std::optional<LifecycleClock::TimePoint> last_tick_;
  int64_t heals_started_ = 0;         // since this coordinator started (StateCounts)
  std::vector<double> heal_seconds_;  // each heal's, from the loss seen to the healed step
};

}  // namespace ddpd::coordinator
