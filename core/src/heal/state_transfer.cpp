#include "heal/state_transfer.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/communicator_split.h"
#include "device/storage_memory.h"
#include "heal/adam_state_relay.h"
#include "strategies/flat_buffer.h"

namespace ddpd::detail {
namespace {

struct Source {
  int rank = -1;
  int64_t completed_steps = -1;
};

// Step 1 (and 1'): every rank's completed and updated steps.
std::vector<RankProgress> gather_progress(Communicator& comm, RankProgress mine) {
  const auto on = torch::TensorOptions().dtype(torch::kLong).device(comm.info().device);
  torch::Tensor own =
      torch::tensor({mine.completed_steps, mine.updated_steps}, torch::kLong).to(on.device());
  torch::Tensor all = torch::empty({2 * comm.info().world_size}, on);
  comm.all_gather(all, own, "all_gather/heal_completed_steps").wait();
  const auto counts = all.cpu();
  std::vector<RankProgress> ranks(comm.info().world_size);
  for (int r = 0; r < comm.info().world_size; ++r) {
    ranks[r] = {counts[2 * r].item<int64_t>(), counts[2 * r + 1].item<int64_t>()};
  }
  return ranks;
}

// Step 2 of the protocol.
Source choose_source(const std::vector<RankProgress>& ranks) {
  Source source;
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    if (ranks[r].completed_steps > source.completed_steps) source = {r, ranks[r].completed_steps};
  }
  if (source.completed_steps < 0) {
    throw std::runtime_error("healing: no rank of the new group has training state");
  }
  return source;
}

// Whether every rank (none joining) has completed `steps`.
bool every_rank_at(const std::vector<RankProgress>& ranks, int64_t steps) {
  for (const auto& r : ranks) {
    if (r.completed_steps != steps) return false;
  }
  return true;
}

int joined_rank_of(const std::vector<RankProgress>& ranks) {
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    if (ranks[r].completed_steps < 0) return r;
  }
  return -1;
}

torch::Tensor broadcast_longs(Communicator& comm, std::vector<int64_t> values, int64_t size,
                              int root, const std::string& name) {
  const auto on = torch::TensorOptions().dtype(torch::kLong).device(comm.info().device);
  torch::Tensor t = comm.info().rank == root ? torch::tensor(values, torch::kLong).to(on.device())
                                             : torch::empty({size}, on);
  if (size > 0) comm.broadcast(t, root, name).wait();
  return t.cpu();
}

using AdamState = torch::optim::AdamWParamState;

AdamState* adam_state_of(torch::optim::Optimizer& optimizer, const torch::Tensor& param) {
  auto& state = optimizer.state();
  auto it = state.find(param.unsafeGetTensorImpl());
  return it == state.end() ? nullptr : static_cast<AdamState*>(it->second.get());
}

// The memory a joining rank's replicated state lands in, faulted in before it lands: its
// parameters and buffers (allocated uninitialised), and AdamW moments for every parameter its
// optimizer steps, which transfer_adam_states fills (or drops, where the source has no state).
void make_receiving_memory_resident(const TrainingState& s) {
  for (const auto& t : s.model.parameters()) make_resident(t);
  for (const auto& t : s.model.buffers()) make_resident(t);
  auto& state = s.local_optimizer.state();
  for (const auto& p : s.sync.optimizer_parameters()) {
    if (adam_state_of(s.local_optimizer, p)) continue;
    auto fresh = std::make_unique<AdamState>();
    fresh->exp_avg(torch::empty_like(p, torch::MemoryFormat::Preserve));
    fresh->exp_avg_sq(torch::empty_like(p, torch::MemoryFormat::Preserve));
    make_resident(fresh->exp_avg());
    make_resident(fresh->exp_avg_sq());
    state[p.unsafeGetTensorImpl()] = std::move(fresh);
  }
}

// `params`' AdamW steps, then their moments, from `root` into `optimizer` (null: into scratch,
// for a rank that keeps none of them). Returns the moments' bytes.
int64_t transfer_adam_states(Communicator& comm, const std::vector<torch::Tensor>& params,
                             torch::optim::Optimizer* optimizer, int root,
                             const std::string& name) {
  std::vector<int64_t> steps;
  for (const auto& p : params) {
    const AdamState* adam = optimizer ? adam_state_of(*optimizer, p) : nullptr;
    steps.push_back(adam ? adam->step() : -1);
  }
  const torch::Tensor agreed = broadcast_longs(comm, steps, static_cast<int64_t>(params.size()),
                                               root, "broadcast/" + name + "_steps");
  std::vector<torch::Tensor> moments;
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t step = agreed[static_cast<int64_t>(i)].item<int64_t>();
    const torch::Tensor& p = params[i];
    if (!optimizer) {
      if (step >= 0) {
        moments.push_back(torch::empty_like(p, torch::MemoryFormat::Preserve));
        moments.push_back(torch::empty_like(p, torch::MemoryFormat::Preserve));
      }
      continue;
    }
    auto& state = optimizer->state();
    if (step < 0) {
      state.erase(p.unsafeGetTensorImpl());
      continue;
    }
    AdamState* adam = adam_state_of(*optimizer, p);
    if (!adam) {
      // Uninitialised: the broadcast below writes every element.
      auto fresh = std::make_unique<AdamState>();
      fresh->exp_avg(torch::empty_like(p, torch::MemoryFormat::Preserve));
      fresh->exp_avg_sq(torch::empty_like(p, torch::MemoryFormat::Preserve));
      adam = fresh.get();
      state[p.unsafeGetTensorImpl()] = std::move(fresh);
    }
    adam->step(step);
    moments.push_back(adam->exp_avg());
    moments.push_back(adam->exp_avg_sq());
  }
  broadcast_in_chunks(comm, moments, root, "broadcast/" + name + "_moments");
  int64_t bytes = 0;
  for (const auto& m : moments) bytes += m.nbytes();
  return bytes;
}

// A failure over a group of two split from the job's (`members`, ascending), naming the job's
// rank rather than the pair's 0 or 1.
CollectiveError in_the_job(const CollectiveError& e, const std::vector<int>& members) {
  const int peer = e.peer_rank() == 0 || e.peer_rank() == 1 ? members[e.peer_rank()] : -1;
  return CollectiveError("over the group of ranks " + std::to_string(members[0]) + " and " +
                             std::to_string(members[1]) + " (its ranks 0 and 1): " + e.what(),
                         e.cause(), peer);
}

// Moves shard k's piece with `move` (over a group, from that group's rank `root`; returns the
// bytes): on a host transport at world > 2 over a group of k's owner and its holder k + 1 alone
// (split under `name`), where a rank that keeps nothing of shard k (`keeps` false) takes no part
// and a failure names the job's rank; else (world 2, NCCL, where a new communicator costs more
// than the broadcast saves) over the whole group, from `provider`.
int64_t move_over_shard_pair(Communicator& comm, int k, int provider, bool keeps,
                             const std::string& name,
                             const std::function<int64_t(Communicator&, int)>& move) {
  const int world = comm.info().world_size;
  const int holder = (k + 1) % world;
  if (provider != k && provider != holder) {  // only the owner and its holder keep shard k
    throw std::logic_error("healing: shard " + std::to_string(k) + "'s provider " +
                           std::to_string(provider) + " is neither its owner nor its holder");
  }
  if (world <= 2 || !comm.info().device.is_cpu()) return move(comm, provider);
  if (!keeps) return 0;
  const std::vector<int> members{std::min(k, holder), std::max(k, holder)};
  try {
    std::shared_ptr<Communicator> pair = split_group(comm, members, name);
    return move(*pair, provider == members[0] ? 0 : 1);
  } catch (const CollectiveError& e) {
    throw in_the_job(e, members);
  }
}

// Steps 4' (each shard's parameters where the state source's are not at T, and its moments
// where its owner or holder lacks them) and 5': see plan_sharded_heal.
int64_t transfer_optimizer_shards(const TrainingState& s, Communicator& comm,
                                  const ShardedHealPlan& plan) {
  ShardedOptimizer& sharded = *s.sharded;
  const int rank = comm.info().rank;
  const std::vector<torch::Tensor> params = s.sync.optimizer_parameters();
  int64_t bytes = 0;
  for (int k = 0; k < comm.info().world_size; ++k) {
    std::vector<torch::Tensor> shard;
    for (const auto& p : params) {
      if (sharded.owner_of(p) == k) shard.push_back(p);
    }
    if (!plan.source_at_target) {
      torch::NoGradGuard no_grad;
      broadcast_in_chunks(comm, shard, plan.shard_provider[k],
                          "broadcast/heal_shard" + std::to_string(k) + "_parameters");
      for (const auto& p : shard) bytes += p.nbytes();
    }
    if (!plan.moments_move[k]) continue;
    torch::optim::Optimizer* keeper = k == rank                   ? &sharded.local_optimizer()
                                      : k == sharded.replica_of() ? sharded.replica_optimizer()
                                                                  : nullptr;
    const std::string name = "heal_shard" + std::to_string(k);
    bytes += move_over_shard_pair(comm, k, plan.shard_provider[k], keeper != nullptr, name,
                                  [&](Communicator& group, int root) {
                                    return transfer_adam_states(group, shard, keeper, root, name);
                                  });
  }
  sharded.set_updated_steps(plan.target_step);
  return bytes;
}

// One shard of steps 4f and 5f: its parameter elements, then their AdamW steps and moments,
// from `root` over `group`, into this rank's `keeper` (null: scratch). Returns their bytes.
int64_t move_fsdp_shard(Communicator& group, const std::vector<torch::Tensor>& shard, int root,
                        torch::optim::Optimizer* keeper, const std::string& name) {
  {
    torch::NoGradGuard no_grad;
    broadcast_in_chunks(group, shard, root, "broadcast/" + name + "_parameters");
  }
  int64_t bytes = 0;
  for (const auto& p : shard) bytes += p.nbytes();
  return bytes + transfer_adam_states(group, shard, keeper, root, name);
}

// Steps 4f and 5f (fsdp with --shard-replicas 1): each shard whose owner or holder lacks it at T
// comes from its provider, whole, over the pair of its owner and holder where
// move_over_shard_pair takes one. Returns the bytes broadcast.
int64_t transfer_fsdp_shards(const TrainingState& s, Communicator& comm,
                             const ShardedHealPlan& plan) {
  const int rank = comm.info().rank;
  const int world = comm.info().world_size;
  int64_t bytes = 0;
  for (int k = 0; k < world; ++k) {
    if (!plan.moments_move[k]) continue;
    torch::optim::Optimizer* keeper = k == rank                 ? &s.local_optimizer
                                      : (k + 1) % world == rank ? s.replica_optimizer
                                                                : nullptr;
    const std::string name = "heal_shard" + std::to_string(k);
    bytes += move_over_shard_pair(comm, k, plan.shard_provider[k], keeper != nullptr, name,
                                  [&](Communicator& group, int root) {
                                    return move_fsdp_shard(group,
                                                           sharding_of(s.sync).shard_parameters(k),
                                                           root, keeper, name);
                                  });
  }
  return bytes;
}

int64_t module_state_bytes(torch::nn::Module& module) {
  int64_t bytes = 0;
  for (const auto& p : unique_parameters(module)) bytes += p.nbytes();
  for (const auto& b : module.buffers(/*recurse=*/true)) bytes += b.nbytes();
  return bytes;
}

// Step 4' where the state source's parameters are not all at T: its buffers and frozen
// parameters, which no optimizer changes. Returns their bytes.
int64_t broadcast_fixed_state(torch::nn::Module& module, Communicator& comm, int root) {
  std::vector<torch::Tensor> fixed;
  for (const auto& p : unique_parameters(module)) {
    if (!p.requires_grad()) fixed.push_back(p);
  }
  for (const auto& b : module.buffers(/*recurse=*/true)) fixed.push_back(b);
  torch::NoGradGuard no_grad;
  broadcast_in_chunks(comm, fixed, root, "broadcast/heal_fixed_state");
  int64_t bytes = 0;
  for (const auto& t : fixed) bytes += t.nbytes();
  return bytes;
}

// Steps 3 and 3': the launch order from `root`, and every strategy regroups with it (ZeRO-1's
// optimizer too, unless a shrink resharded it already: step 3'').
void regroup_strategies(const TrainingState& s, std::shared_ptr<Communicator> comm, int root,
                        bool sharded_regrouped = false) {
  Communicator& c = *comm;
  const bool is_source = c.info().rank == root;
  Regrouping& regrouping = regrouping_of(s.sync);
  const std::vector<int64_t> order = is_source ? regrouping.launch_order() : std::vector<int64_t>{};
  const int64_t order_size = broadcast_longs(c, {static_cast<int64_t>(order.size())}, 1, root,
                                             "broadcast/heal_order_size")[0]
                                 .item<int64_t>();
  const torch::Tensor agreed_order =
      broadcast_longs(c, order, order_size, root, "broadcast/heal_launch_order");
  std::vector<int64_t> launch_order(order_size);
  for (int64_t k = 0; k < order_size; ++k) launch_order[k] = agreed_order[k].item<int64_t>();
  if (s.sharded && !sharded_regrouped) s.sharded->regroup(comm);
  regrouping.regroup(std::move(comm), launch_order);
}

std::string progress_table(const std::vector<RankProgress>& ranks) {
  std::string text;
  for (size_t r = 0; r < ranks.size(); ++r) {
    text += (r ? ", rank " : "rank ") + std::to_string(r) + " completed " +
            std::to_string(ranks[r].completed_steps) + " updated " +
            std::to_string(ranks[r].updated_steps);
  }
  return text;
}

// Step 4's receivers: where the rank that joined is the only one whose completed steps are not
// the source's, on a host transport with a survivor to spare, the source and that rank (the other
// survivors hold the source's bits already); else none, and the whole group takes part. On the
// small model (1,544 MB) at world 3 plus a spare over shm on 2 cores, the heal recovered in 6.7 s
// against 7.4-8.8 s with a broadcast to every rank (bench_heal.sh). NCCL's broadcast costs little
// more for more ranks, and a new communicator more than it saves.
std::vector<int> sole_receiver_pair(const std::vector<RankProgress>& ranks, const Source& source,
                                    const CommunicatorInfo& info) {
  const int joined = joined_rank_of(ranks);
  if (!info.device.is_cpu() || joined < 0 || info.world_size <= 2) return {};
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    if (r != joined && ranks[r].completed_steps != source.completed_steps) return {};
  }
  return {std::min(source.rank, joined), std::max(source.rank, joined)};
}

// Step 4 for a replicated strategy: the parameters and buffers, then the AdamW moments, from
// `root` over `comm` (the job's group, or the pair of sole_receiver_pair). Returns their bytes.
int64_t transfer_replicated_state(const TrainingState& s, Communicator& comm, int root,
                                  const AfterParameters& after_parameters, int64_t resumed_step) {
  broadcast_module_state(s.model, comm, root);
  int64_t bytes = module_state_bytes(s.model);
  if (after_parameters) after_parameters(resumed_step);
  return bytes + transfer_adam_states(comm, s.sync.optimizer_parameters(), &s.local_optimizer, root,
                                      "heal_adam");
}

// transfer_replicated_state over the pair `members` (this rank among them). A failure names the
// job's rank, not the pair's.
int64_t transfer_to_joined_rank(const TrainingState& s, Communicator& comm,
                                const std::vector<int>& members, int source_rank,
                                const AfterParameters& after_parameters, int64_t resumed_step) {
  try {
    std::shared_ptr<Communicator> two = split_group(comm, members, "heal_state");
    return transfer_replicated_state(s, *two, source_rank == members[0] ? 0 : 1, after_parameters,
                                     resumed_step);
  } catch (const CollectiveError& e) {
    throw in_the_job(e, members);
  }
}

// `params`' AdamW state moved from `from` into `into`, on this rank, without a copy.
void adopt_adam_states(const std::vector<torch::Tensor>& params, torch::optim::Optimizer& from,
                       torch::optim::Optimizer& into) {
  for (const auto& p : params) {
    auto it = from.state().find(p.unsafeGetTensorImpl());
    if (it != from.state().end()) into.state()[p.unsafeGetTensorImpl()] = std::move(it->second);
  }
}

// Step 5'': `params`' AdamW steps and moments from `root`, which reads them from `from` (the
// optimizer of its previous layout that held them), into `into` (this rank's new keeper of
// them; null: scratch). Returns the moments' bytes.
int64_t move_adam_states(Communicator& comm, const std::vector<torch::Tensor>& params,
                         torch::optim::Optimizer* from, torch::optim::Optimizer* into, int root,
                         const std::string& name) {
  const bool is_root = comm.info().rank == root;
  TORCH_CHECK(!is_root || from, "healing: the provider of shard ", name, " holds no state for it");
  const int64_t bytes = transfer_adam_states(comm, params, is_root ? from : into, root, name);
  if (is_root && into) adopt_adam_states(params, *from, *into);
  return bytes;
}

// Step 5'': each old shard k's moments, by the new owner of its parameters, from k's provider to
// that owner and its successor (the new holder of its replica); where both held k at T already
// (each is k's old owner or holder, at T), each moves its own copy into its new optimizer and
// nothing travels. Returns the bytes broadcast.
int64_t move_moments_for_reshard(Communicator& c, ShardedOptimizer& sharded,
                                 const ShardedOptimizer::PreviousLayout& previous,
                                 const ShardedHealPlan& plan,
                                 const std::vector<RankProgress>& by_old_rank,
                                 const ShrinkFrom& shrink) {
  const int world = c.info().world_size;
  const ShrinkFrom::Renumbering numbers{shrink.lost_rank};
  const std::vector<torch::Tensor>& params = sharded.parameters();
  int64_t bytes = 0;
  for (int k = 0; k < shrink.world_size; ++k) {
    const auto holds_at_target = [&](int rank) {
      const int q = numbers.old_rank_of(rank);
      return (q == k || q == (k + 1) % shrink.world_size) && by_old_rank[q].completed_steps >= 0 &&
             by_old_rank[q].updated_steps == plan.target_step;
    };
    for (int owner = 0; owner < world; ++owner) {
      std::vector<torch::Tensor> moving;
      for (size_t i = 0; i < params.size(); ++i) {
        if (previous.owners[i] == k && sharded.owner_of(params[i]) == owner) {
          moving.push_back(params[i]);
        }
      }
      if (moving.empty()) continue;
      torch::optim::Optimizer* keeper = sharded.keeper_of(owner);
      const int successor = (owner + 1) % world;  // world 1 keeps no replica: itself
      if (holds_at_target(owner) && holds_at_target(successor)) {
        if (keeper) adopt_adam_states(moving, *previous.holder_of(k), *keeper);
        continue;
      }
      bytes += move_adam_states(c, moving, previous.holder_of(k), keeper,
                                numbers.new_rank_of(plan.shard_provider[k]),
                                "reshard_" + std::to_string(k) + "_to_" + std::to_string(owner));
    }
  }
  return bytes;
}

// Step 4'' where some survivor's parameters are not all at T: as step 4', by the old layout.
int64_t move_parameters_for_reshard(const TrainingState& s, Communicator& comm,
                                    const ShardedHealPlan& plan, const std::vector<int>& owners,
                                    const ShrinkFrom::Renumbering& numbers, int source) {
  if (plan.source_at_target) {
    broadcast_module_state(s.model, comm, source);
    return module_state_bytes(s.model);
  }
  int64_t bytes = broadcast_fixed_state(s.model, comm, source);
  const std::vector<torch::Tensor>& params = s.sharded->parameters();
  torch::NoGradGuard no_grad;
  for (int k = 0; k < static_cast<int>(plan.shard_provider.size()); ++k) {
    std::vector<torch::Tensor> shard;
    for (size_t i = 0; i < params.size(); ++i) {
      if (owners[i] == k) shard.push_back(params[i]);
    }
    broadcast_in_chunks(comm, shard, numbers.new_rank_of(plan.shard_provider[k]),
                        "broadcast/reshard_shard" + std::to_string(k) + "_parameters");
    for (const auto& p : shard) bytes += p.nbytes();
  }
  return bytes;
}

// The survivors' progress (step 1'', in the new numbering) by their ranks in the old group, the
// lost rank holding nothing.
std::vector<RankProgress> progress_by_old_rank(const std::vector<RankProgress>& ranks,
                                               const ShrinkFrom& shrink, const char* strategy) {
  if (shrink.lost_rank < 0 || shrink.lost_rank >= shrink.world_size) {
    throw std::runtime_error(std::string("healing: ") + strategy + " shrinking in place from " +
                             std::to_string(shrink.world_size) +
                             " ranks needs the lost rank's number to lay its shards out again");
  }
  const ShrinkFrom::Renumbering numbers{shrink.lost_rank};
  std::vector<RankProgress> by_old_rank(shrink.world_size);
  for (int r = 0; r < shrink.world_size; ++r) {
    if (r != shrink.lost_rank) by_old_rank[r] = ranks.at(numbers.new_rank_of(r));
  }
  return by_old_rank;
}

// Steps 2f''-4f'': fsdp shrinking in place (the protocol in state_transfer.h).
TransferredState relayout_in_place(const TrainingState& s, std::shared_ptr<Communicator> comm,
                                   const std::vector<RankProgress>& ranks, const ShrinkFrom& shrink,
                                   const AfterParameters& after_parameters) {
  const ShrinkFrom::Renumbering numbers{shrink.lost_rank};
  const std::vector<RankProgress> by_old_rank = progress_by_old_rank(ranks, shrink, "fsdp");
  const ShardedHealPlan plan = plan_sharded_heal(by_old_rank);
  std::vector<OldShardHolders> shards(shrink.world_size);
  for (int k = 0; k < shrink.world_size; ++k) {
    shards[k].provider = numbers.new_rank_of(plan.shard_provider[k]);
    for (int r = 0; r < comm->info().world_size; ++r) {
      const int q = numbers.old_rank_of(r);
      shards[k].holds.push_back((q == k || q == (k + 1) % shrink.world_size) &&
                                by_old_rank[q].completed_steps >= 0 &&
                                by_old_rank[q].updated_steps == plan.target_step);
    }
  }
  if (after_parameters) after_parameters(plan.target_step);
  AdamStateRelay relay(s.local_optimizer, *s.replica_optimizer);
  TransferredState out{-1, numbers.new_rank_of(plan.state_source), plan.target_step, 0, 0};
  ParameterSharding& sharding = sharding_of(s.sync);
  out.bytes = sharding.relayout(std::move(comm), shards, relay);
  relay.adopt(s.sync.optimizer_parameters(), sharding.replica_parameters());
  return out;
}

// Steps 2''-5'': ZeRO-1 shrinking in place (the protocol in state_transfer.h).
TransferredState reshard_in_place(const TrainingState& s, std::shared_ptr<Communicator> comm,
                                  const std::vector<RankProgress>& ranks, const ShrinkFrom& shrink,
                                  const AfterParameters& after_parameters) {
  Communicator& c = *comm;
  const ShrinkFrom::Renumbering numbers{shrink.lost_rank};
  const std::vector<RankProgress> by_old_rank = progress_by_old_rank(ranks, shrink, "ZeRO-1");
  const ShardedHealPlan plan = plan_sharded_heal(by_old_rank);
  const int source = numbers.new_rank_of(plan.state_source);
  ShardedOptimizer& sharded = *s.sharded;
  const ShardedOptimizer::PreviousLayout previous = sharded.reshard(comm);
  regroup_strategies(s, std::move(comm), source, /*sharded_regrouped=*/true);

  TransferredState out{-1, source, plan.target_step, 0, 0};
  bool whole = true;  // every survivor's parameters and shards at T
  for (const auto& r : ranks) {
    whole = whole && r.completed_steps == plan.target_step && r.updated_steps == r.completed_steps;
  }
  if (!whole) {
    out.bytes += move_parameters_for_reshard(s, c, plan, previous.owners, numbers, source);
  }
  if (after_parameters) after_parameters(plan.target_step);
  out.bytes += move_moments_for_reshard(c, sharded, previous, plan, by_old_rank, shrink);
  sharded.set_updated_steps(plan.target_step);
  return out;
}

}  // namespace

ShardedHealPlan plan_sharded_heal(const std::vector<RankProgress>& ranks) {
  const int world = static_cast<int>(ranks.size());
  auto at = [&](int r, int64_t step) {
    return ranks[r].completed_steps >= 0 && ranks[r].updated_steps == step;
  };
  std::optional<ShardedHealPlan> best;
  for (int candidate = 0; candidate < world; ++candidate) {
    const int64_t t = ranks[candidate].updated_steps;
    if (ranks[candidate].completed_steps < 0 || (best && best->target_step >= t)) continue;
    ShardedHealPlan plan{t, -1, false, std::vector<int>(world, -1), std::vector<bool>(world)};
    bool whole = true;
    for (int k = 0; k < world && whole; ++k) {
      const int holder = (k + 1) % world;
      plan.shard_provider[k] = at(k, t) ? k : at(holder, t) ? holder : -1;
      plan.moments_move[k] = !at(k, t) || !at(holder, t);
      whole = plan.shard_provider[k] >= 0;
    }
    if (whole) best = plan;
  }
  if (!best) {
    throw std::runtime_error(
        "healing: no step at which every optimizer shard is held by its owner or its replica's "
        "holder (" +
        progress_table(ranks) + ")");
  }
  for (int r = world - 1; r >= 0; --r) {
    const bool clean = at(r, best->target_step) && ranks[r].completed_steps == best->target_step;
    if (clean || (!best->source_at_target && ranks[r].completed_steps >= 0)) {
      best->state_source = r;
      best->source_at_target = clean;
    }
  }
  return *best;
}

TransferredState transfer_training_state(const TrainingState& s, std::shared_ptr<Communicator> comm,
                                         int64_t completed_steps,
                                         const AfterParameters& after_parameters,
                                         const ShrinkFrom& shrink) {
  const auto start = std::chrono::steady_clock::now();
  Communicator& c = *comm;
  ShardedOptimizer* sharded = s.sharded;
  // fsdp counts a step completed right after its update, with no collective between.
  const bool fsdp_shards = s.replica_optimizer != nullptr;
  const int64_t updated =
      completed_steps < 0 || !sharded ? completed_steps : sharded->updated_steps();
  // Faulting the pages in first took the small model's transfer (1,544 MB) from 1.25 to 1.09 s
  // (bench_heal.sh, three runs each): the kernel zeroes them faster than copies first touching.
  if (completed_steps < 0 && !sharded && !fsdp_shards) make_receiving_memory_resident(s);
  const std::vector<RankProgress> ranks = gather_progress(c, {completed_steps, updated});
  if ((sharded || fsdp_shards) && shrink.world_size > c.info().world_size) {
    TransferredState out =
        sharded ? reshard_in_place(s, std::move(comm), ranks, shrink, after_parameters)
                : relayout_in_place(s, std::move(comm), ranks, shrink, after_parameters);
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return out;
  }
  std::optional<ShardedHealPlan> plan;
  Source source;
  if (sharded || fsdp_shards) {
    plan = plan_sharded_heal(ranks);
    source = {plan->state_source, plan->target_step};
  } else {
    source = choose_source(ranks);
  }
  regroup_strategies(s, std::move(comm), source.rank);

  TransferredState out;
  out.joined_rank = joined_rank_of(ranks);
  out.source_rank = source.rank;
  out.completed_steps = source.completed_steps;
  const auto seconds_since_start = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  if (!plan && every_rank_at(ranks, source.completed_steps)) {
    out.seconds = seconds_since_start();
    return out;  // step 4 of the header: the same bits on every rank already
  }
  if (!plan) {
    const std::vector<int> pair = sole_receiver_pair(ranks, source, c.info());
    const bool member = pair.empty() || pair[0] == c.info().rank || pair[1] == c.info().rank;
    if (!member && after_parameters) after_parameters(source.completed_steps);
    if (member) {
      out.bytes = pair.empty() ? transfer_replicated_state(s, c, source.rank, after_parameters,
                                                           source.completed_steps)
                               : transfer_to_joined_rank(s, c, pair, source.rank, after_parameters,
                                                         source.completed_steps);
    }
    out.seconds = seconds_since_start();
    return out;
  }
  if (fsdp_shards) {
    out.bytes = broadcast_fixed_state(s.model, c, source.rank);
    if (after_parameters) after_parameters(source.completed_steps);
    out.bytes += transfer_fsdp_shards(s, c, *plan);
    out.seconds = seconds_since_start();
    return out;
  }
  if (plan->source_at_target) {
    broadcast_module_state(s.model, c, source.rank);
    out.bytes = module_state_bytes(s.model);
  } else {
    // The source's trainable parameters are of two steps: each shard's come from its provider
    // (transfer_optimizer_shards), and sending the source's first would overwrite them there.
    out.bytes = broadcast_fixed_state(s.model, c, source.rank);
  }
  if (after_parameters) after_parameters(source.completed_steps);
  out.bytes += transfer_optimizer_shards(s, c, *plan);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace ddpd::detail
