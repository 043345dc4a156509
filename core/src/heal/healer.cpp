#include "heal/healer.h"

#include <chrono>
#include <cstdio>
#include <string>

namespace ddpd::detail {

Healer::Healer(const DdpJobOptions& options, FaultInjector& injector, int join_generation)
    : options_(options),
      injector_(injector),
      generation_(join_generation),
      joining_(join_generation > 0) {}

bool Healer::healable(bool sharded_optimizer, int world) const {
  // Sharded state (ZeRO-1's optimizer shards, fsdp's shards) heals from its replicas
  // (--shard-replicas 1).
  const bool shards_state = sharded_optimizer || options_.strategy == Strategy::kFsdp;
  return (!shards_state || options_.shard_replicas > 0) && world > 1;
}

std::optional<int64_t> Healer::heal(const Regroup& regroup, const CollectiveError& failure,
                                    HealTarget& target, TrainingResult& result) {
  const auto start = std::chrono::steady_clock::now();
  Communicator& previous = *target.communicator();  // the Trainer's: it ends at adopt_group
  const int world_before = previous.info().world_size;
  GroupGeneration group = regroup(generation_ + 1, failure, previous);
  std::shared_ptr<Communicator> next = std::move(group.comm);
  if (!next) return std::nullopt;
  const double regroup_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int world = next->info().world_size;
  // Every survivor checks the same facts, so all refuse together, before any collective.
  if (world != world_before) check_shrink(world_before, world);
  ++generation_;
  target.adopt_group(next);
  const ShrinkFrom shrink =
      world == world_before
          ? ShrinkFrom{}
          : ShrinkFrom{world_before, group.lost_rank >= 0 ? group.lost_rank : failure.peer_rank()};
  const TransferredState moved = transfer_state(target, std::move(next), completed_steps_, shrink);
  completed_steps_ = moved.completed_steps;
  // The same global batch in fewer, larger shares: the global sample order is the world's
  // (docs/data.md), so no sample is skipped or read twice.
  target.go_on_at(moved.completed_steps, world);
  // A step this rank reported that the source had not completed is trained again.
  while (!result.steps.empty() && result.steps.back().step >= moved.completed_steps) {
    result.steps.pop_back();
  }
  // The rank that joined has the lost rank's number; the regroup names it where it knows, the
  // failure only when the transport saw it leave.
  const int lost = moved.joined_rank >= 0 ? moved.joined_rank
                   : group.lost_rank >= 0 ? group.lost_rank
                                          : failure.peer_rank();
  result.heals.push_back({generation_, lost, moved.source_rank, moved.completed_steps, moved.bytes,
                          regroup_seconds, moved.seconds, world});
  std::fprintf(stderr,
               "ddpd: healed into generation %d (rank %d lost): state of rank %d, %lld bytes in "
               "%.3f s, after %.3f s to regroup; going on at step %lld with %d ranks\n",
               generation_, lost, moved.source_rank, static_cast<long long>(moved.bytes),
               moved.seconds, regroup_seconds, static_cast<long long>(moved.completed_steps),
               world);
  return moved.completed_steps;
}

int64_t Healer::take_state_as_joiner(HealTarget& target, TrainingResult& result) {
  // The group it joined is the one the Trainer was built with.
  const std::shared_ptr<Communicator> comm = target.communicator();
  const TransferredState moved = transfer_state(target, comm, /*steps_done=*/-1);
  completed_steps_ = moved.completed_steps;
  target.go_on_at(moved.completed_steps, comm->info().world_size);
  joining_ = false;
  result.heals.push_back({generation_, comm->info().rank, moved.source_rank, moved.completed_steps,
                          moved.bytes, 0.0, moved.seconds, comm->info().world_size});
  return moved.completed_steps;
}

void Healer::check_shrink(int world_before, int world) const {
  const std::string what = "healing: shrinking in place from " + std::to_string(world_before) +
                           " to " + std::to_string(world) + " ranks: ";
  if (options_.batch_size % (static_cast<int64_t>(world) * options_.grad_accum) != 0) {
    throw std::runtime_error(what + "--batch " + std::to_string(options_.batch_size) +
                             " does not split into " + std::to_string(world) + " ranks x " +
                             "--grad-accum " + std::to_string(options_.grad_accum));
  }
}

TransferredState Healer::transfer_state(HealTarget& target, std::shared_ptr<Communicator> next,
                                        int64_t steps_done, const ShrinkFrom& shrink) {
  // A rank of the new group lost while the state moves fails the heal: no second heal is tried
  // (the coordinator restarts the job from its checkpoint), so every rank fails, naming it.
  try {
    return transfer_training_state(
        target.training_state(), std::move(next), steps_done,
        [this](int64_t resumed_step) { injector_.during_state_transfer(resumed_step); }, shrink);
  } catch (const CollectiveError& e) {
    throw CollectiveError("healing into group generation " + std::to_string(generation_) +
                              ": the state transfer failed: " + e.what(),
                          e.cause(), e.peer_rank());
  }
}

}  // namespace ddpd::detail
