// Restart policy: when a job runs again, at which sizes, with which spec, and what its history
// says about it. Pure functions of the job as the API describes it, shared by the coordinator
// (automatic restarts under --max-restarts) and ddpctl (`ddpctl resume`, a restart by hand).
// `ddp` is the job's DDP options as its holder decoded them once (from_proto of spec().ddp());
// for a comm job, any value (they return false or nothing).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ddpd/common/job_options.h"
#include "ddpd/v1/ddpd.pb.h"

namespace ddpd {

// The attempt now running or next to run (0: the first): results, step reports and losses of
// any other attempt's ranks are stale.
int current_attempt(const v1::Job& job);

// Whether a failure of the current attempt restarts the job (a DDP job with --max-restarts not
// yet used up) rather than failing it.
bool may_restart(const v1::Job& job, const DdpJobOptions& ddp);

// Whether a lost rank of the running attempt can be replaced in place (docs/healing.md): a DDP
// job of a replicated strategy (naive, flat, overlap, bucketed) without --no-heal, and without
// ZeRO-1 unless it keeps --shard-replicas 1, at world size 2 or more, whose restarts and heals
// together have not used up --max-restarts.
bool may_heal(const v1::Job& job, const DdpJobOptions& ddp);

// Whether a lost rank's survivors can go on in place one rank fewer, where no idle worker can
// replace it (docs/healing.md): may_heal (ZeRO-1 and fsdp only with --shard-replicas 1: their
// shards are laid out again for world - 1 from the owners and their copies), and besides
// --min-world-size at most world - 1, and a --batch that splits into world - 1 ranks x
// --grad-accum. The running group is the job's worker_ids.
bool may_shrink_in_place(const v1::Job& job, const DdpJobOptions& ddp, int lost_rank);

// A survivor's rank in the group a HealGroup forms: its own where the group keeps its size (a
// replacement takes the lost number), one lower above the lost rank where it shrank.
int rank_after_heal(const v1::HealGroup& heal, int world_before, int rank);

// Smaller world sizes a restarted job may start at, largest first: from world_size - 1 down to
// --min-world-size, those that divide the global batch. None for a first attempt, a comm job, or
// a job without --min-world-size.
std::vector<int> restart_fallback_sizes(const v1::Job& job, const DdpJobOptions& ddp);

// The spec a job runs again with: it resumes from `resume` (a checkpoint path, a directory whose
// `latest` is read, or "auto") and its fault injection is dropped (an injected fault fires in the
// first attempt only, or a restart would fail the same way). Requires a DDP spec.
v1::JobSpec resumed_spec(const v1::JobSpec& spec, const std::string& resume);

// The spec of the coordinator's next attempt: with --checkpoint-dir, resumed_spec(spec, "auto")
// (the latest checkpoint, if the last attempt made one); without, from the start, injection
// dropped.
v1::JobSpec next_attempt_spec(const v1::JobSpec& spec);

// What a restart records in the job's history, e.g. "restart 1 of 2 after: worker w1 (rank 1)
// lost: …; world size 3 → 2, resuming step-40 (/ckpt)". `last_checkpoint_step`: the step after
// which every rank reported a checkpoint (0: none reported).
struct RestartFacts {
  int attempt = 1;
  int max_restarts = 0;
  std::string reason;
  int previous_world_size = 0;
  int world_size = 0;
  std::string checkpoint_dir;  // empty: the job keeps no checkpoints
  int64_t last_checkpoint_step = 0;
};
std::string restart_text(const RestartFacts& facts);

}  // namespace ddpd
