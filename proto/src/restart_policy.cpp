#include "ddpd/api/restart_policy.h"

#include <algorithm>

#include "ddpd/api/spec_convert.h"
#include "ddpd/common/incident_kind.h"

namespace ddpd {

int current_attempt(const v1::Job& job) { return std::max(0, job.attempts() - 1); }

bool may_restart(const v1::Job& job, const DdpJobOptions& ddp) {
  return job.spec().has_ddp() && current_attempt(job) < ddp.max_restarts;
}

bool may_heal(const v1::Job& job, const DdpJobOptions& ddp) {
  if (!job.spec().has_ddp() || job.worker_ids_size() < 2) return false;
  // Sharded state (ZeRO-1's, fsdp's) heals only where a copy of each shard is kept
  // (--shard-replicas 1).
  if (ddp.no_heal) return false;
  const bool shards_state = ddp.shard_optimizer || ddp.strategy == Strategy::kFsdp;
  if (shards_state && ddp.shard_replicas == 0) return false;
  int heals = 0;
  const std::string& heal = enum_name(IncidentKind::kHeal);
  for (const auto& incident : job.incidents()) heals += incident.kind() == heal;
  return current_attempt(job) + heals < ddp.max_restarts;
}

bool may_shrink_in_place(const v1::Job& job, const DdpJobOptions& ddp, int lost_rank) {
  const int world = job.worker_ids_size();
  if (!may_heal(job, ddp) || lost_rank < 0 || lost_rank >= world) return false;
  // may_heal: sharded state (ZeRO-1's, fsdp's) keeps replicas, so its shards can be laid out
  // again for the survivors.
  return ddp.min_world_size > 0 && ddp.min_world_size <= world - 1 &&
         ddp.batch_size % (static_cast<int64_t>(world - 1) * ddp.grad_accum) == 0;
}

int rank_after_heal(const v1::HealGroup& heal, int world_before, int rank) {
  const bool shrank = heal.world_size() > 0 && heal.world_size() < world_before;
  return shrank && rank > heal.lost_rank() ? rank - 1 : rank;
}

std::vector<int> restart_fallback_sizes(const v1::Job& job, const DdpJobOptions& ddp) {
  std::vector<int> sizes;
  if (job.attempts() == 0 || !job.spec().has_ddp()) return sizes;
  if (ddp.min_world_size <= 0) return sizes;
  for (int n = job.spec().world_size() - 1; n >= std::max(1, ddp.min_world_size); --n) {
    if (ddp.batch_size % n == 0) sizes.push_back(n);
  }
  return sizes;
}

v1::JobSpec resumed_spec(const v1::JobSpec& spec, const std::string& resume) {
  v1::JobSpec next = spec;
  next.mutable_ddp()->set_resume(resume);
  next.mutable_ddp()->clear_inject();
  return next;
}

v1::JobSpec next_attempt_spec(const v1::JobSpec& spec) {
  if (!spec.has_ddp()) return spec;
  if (!spec.ddp().checkpoint_dir().empty()) return resumed_spec(spec, "auto");
  v1::JobSpec next = spec;
  next.mutable_ddp()->clear_inject();
  return next;
}

std::string restart_text(const RestartFacts& facts) {
  const std::string& dir = facts.checkpoint_dir;
  const std::string from =
      dir.empty() ? "from the start (no --checkpoint-dir)"
      : facts.last_checkpoint_step > 0
          ? "resuming step-" + std::to_string(facts.last_checkpoint_step) + " (" + dir + ")"
          : "resuming the latest checkpoint under " + dir +
                " if there is one (this job has reported none), else from the start";
  return "restart " + std::to_string(facts.attempt) + " of " + std::to_string(facts.max_restarts) +
         " after: " + facts.reason + "; world size " + std::to_string(facts.previous_world_size) +
         " → " + std::to_string(facts.world_size) + ", " + from;
}

}  // namespace ddpd
