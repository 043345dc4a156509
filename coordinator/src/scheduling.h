// Pure pieces of the coordinator: the job state machine and FIFO placement.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ddpd/api/restart_policy.h"
#include "ddpd/common/job_options.h"
#include "ddpd/v1/ddpd.pb.h"

namespace ddpd::coordinator {

// Job lifecycle: PENDING → RUNNING → SUCCEEDED | FAILED | CANCELLED, plus PENDING → FAILED |
// CANCELLED (never scheduled) and RUNNING → PENDING (an automatic restart). Terminal states never
// change.
bool transition_allowed(v1::JobState from, v1::JobState to);

struct PendingJob {
  std::string job_id;
  int world_size = 1;
  Backend backend = Backend::kGloo;  // what every rank's worker must offer
  // Smaller sizes the job may also start at, largest first (a restart's elastic shrink).
  std::vector<int> fallback_sizes;
};

// Steps a job reports (comm jobs report none).

// The process-group backend a job needs: nccl for comm jobs on nccl and DDP jobs on cuda.
Backend required_backend(const v1::JobSpec& spec, const DdpJobOptions& ddp);

struct IdleWorker {
  std::string worker_id;
  std::vector<Backend> backends;  // from its hello (offered_backends)
};

// The backends a worker's hello names, parsed once: empty (an older worker) means gloo only,
// and a name this coordinator does not know (a newer worker's) is left out.
std::vector<Backend> offered_backends(const std::vector<std::string>& names);

struct Placement {
  std::string job_id;
  std::vector<std::string> worker_ids;  // by rank
};

// FIFO with backfill, as Slurm's: jobs start in submission order, and a job that cannot start
// now blocks every job behind it (no overtaking, so a large job is not starved), unless it can
// never start on the registered workers (`registered`: every worker with a live session, idle or
// busy): more ranks than registered workers offering its backend, even at its smallest fallback
// size. Such a job waits for a worker to register and blocks no one: a later job that fits on the
// idle workers starts, since it cannot delay a job that could not have started anyway. A job
// starts when at least world_size idle workers offer its backend (or, failing that, the largest
// of its fallback sizes that fits); ranks follow `idle_workers` order among those.
std::optional<Placement> place_next(const std::vector<PendingJob>& pending_in_order,
                                    const std::vector<IdleWorker>& idle_workers,
                                    const std::vector<IdleWorker>& registered);

// Whether `job` could start once the running jobs end: enough registered workers offer its
// backend for its world size or one of its fallback sizes.
bool fits_registered(const PendingJob& job, const std::vector<IdleWorker>& registered);

// Why a pending job waits, kept current as workers come and go (as Slurm's reason column):
// "waiting for 5 idle workers offering gloo: 1 registered, 1 idle" (with, for a job that never
// fits the registered workers, "; never fits the 1 registered workers offering gloo: later
// jobs that fit start first"), or "queued behind job-000003", the oldest job that fits the
// registered workers.
std::string pending_reason(const std::vector<PendingJob>& pending_in_order, size_t index,
                           const std::vector<IdleWorker>& registered,
                           const std::vector<IdleWorker>& idle_workers);

// The memory a DDP job's rank must fit in at submission: the largest registered worker's host
// memory, or for a CUDA job (--device cuda) its GPU's, as their hellos advertise them. `bytes` 0:
// none advertises it, nothing to check yet. `where` names it for the refusal.
struct AdmissionBudget {
  int64_t bytes = 0;
  std::string where;
};
AdmissionBudget admission_budget(Device device, const std::vector<v1::WorkerHello>& registered);

// Aggregates one step over ranks: the slowest rank's times (a step ends when every rank's
// does), the mean loss, the largest spread.
v1::StepReport aggregate_step(const std::vector<v1::StepReport>& ranks);

}  // namespace ddpd::coordinator
