#include "ddpd/core/sharded_optimizer.h"

#include <algorithm>
#include <numeric>
#include <unordered_map>

#include "ddpd/common/shard_owners.h"
#include "device/device.h"
#include "strategies/flat_buffer.h"
#include "train/adamw_step.h"

namespace ddpd {

using torch::optim::OptimizerParamGroup;

OptimizerFactory adamw_factory(const torch::optim::AdamWOptions& options) {
  return [options](std::vector<OptimizerParamGroup> groups) {
    return std::make_unique<torch::optim::AdamW>(std::move(groups), options);
  };
}

struct ShardedOptimizer::State {
  std::shared_ptr<Communicator> comm;
  OptimizerFactory factory;
  bool keeps_replicas = false;      // --shard-replicas 1 (a world of one keeps none)
  std::vector<size_t> group_sizes;  // parameters per group, in `params` order
  std::unique_ptr<torch::optim::Optimizer> local;
  std::unique_ptr<torch::optim::Optimizer> replica;  // the predecessor's shard (--shard-replicas)
  int replica_rank = -1;
  int64_t updated_steps = 0;
  std::vector<torch::Tensor> params;                      // every parameter, in assignment order
  std::vector<int> owners;                                // owner rank of params[i]
  std::unordered_map<const void*, size_t> index_by_impl;  // into params
  std::vector<int64_t> owned_bytes;                       // per rank
  double last_broadcast_seconds = 0;

  // Assigns every group's parameters owners over comm's world and builds the optimizers.
  void lay_out(const std::vector<OptimizerParamGroup>& groups);

  // Broadcasts launched and not yet waited for; receivers' coalesced buffers are unflattened
  // into their parameters once they land.
  struct Coalesced {
    torch::Tensor buffer;
    std::vector<torch::Tensor> params;
  };
  std::vector<PendingCollective> pending;
  std::vector<Coalesced> coalesced;

  // Owners by the greedy balance of shard_owners.h, in the group's order. Returns this rank's
  // group; `replica_group` gets the predecessor's (when it keeps replicas).
  OptimizerParamGroup assign(const OptimizerParamGroup& group,
                             std::vector<OptimizerParamGroup>* replica_group = nullptr) {
    const auto& group_params = group.params();
    std::vector<int64_t> bytes;
    for (const auto& p : group_params) {
      TORCH_CHECK(!index_by_impl.count(p.unsafeGetTensorImpl()),
                  "add_param_group: a parameter is already in another group");
      bytes.push_back(static_cast<int64_t>(p.nbytes()));
    }
    const std::vector<int> group_owners = assign_shard_owners(bytes, owned_bytes);
    std::vector<torch::Tensor> owned;
    std::vector<torch::Tensor> replicated;
    for (size_t k = 0; k < group_params.size(); ++k) {
      index_by_impl[group_params[k].unsafeGetTensorImpl()] = params.size();
      params.push_back(group_params[k]);
      owners.push_back(group_owners[k]);
      if (group_owners[k] == comm->info().rank) owned.push_back(group_params[k]);
      if (group_owners[k] == replica_rank) replicated.push_back(group_params[k]);
    }
    auto with_options = [&group](std::vector<torch::Tensor> members) {
      if (group.has_options()) return OptimizerParamGroup(members, group.options().clone());
      return OptimizerParamGroup(members);
    };
    if (replica_group) replica_group->push_back(with_options(std::move(replicated)));
    return with_options(std::move(owned));
  }

  // The replica steps with the owner's hyper-parameters, which the trainer sets on the local
  // optimizer's groups (the learning-rate schedule).
  void follow_local_options() {
    auto& mine = local->param_groups();
    auto& theirs = replica->param_groups();
    for (size_t g = 0; g < mine.size() && g < theirs.size(); ++g) {
      if (mine[g].has_options()) theirs[g].set_options(mine[g].options().clone());
    }
  }

  size_t index_of(const torch::Tensor& p) const {
    auto it = index_by_impl.find(p.unsafeGetTensorImpl());
    TORCH_CHECK(it != index_by_impl.end(), "ShardedOptimizer: parameter is not in this optimizer");
    return it->second;
  }

  // Each owner broadcasts its updated parameters among `indices` (into params), owners in rank
  // order and each owner's parameters in the order given, so every rank walking the same
  // indices issues the same sequence. Parameters of 1 MiB or more go straight from and into the
  // parameter (no copy); smaller ones travel coalesced in buffers of up to 4 MiB. A flat buffer
  // of all of an owner's parameters would be a model-sized temporary at the step's memory peak,
  // eating what sharding the optimizer state saves.
  void launch_broadcasts(const std::vector<size_t>& indices) {
    constexpr int64_t kInPlaceBytes = int64_t{1} << 20;
    constexpr int64_t kCoalescedBytes = int64_t{4} << 20;
    torch::NoGradGuard no_grad;
    for (int r = 0; r < comm->info().world_size; ++r) {
      const std::string name = "broadcast/owner" + std::to_string(r);
      const bool mine = r == comm->info().rank;
      std::vector<torch::Tensor> small;
      int64_t small_bytes = 0;
      auto flush = [&] {
        if (small.empty()) return;
        Coalesced c{mine ? detail::flatten(small) : detail::empty_flat_like(small), small};
        pending.push_back(comm->broadcast(c.buffer, r, name));
        if (!mine) coalesced.push_back(std::move(c));
        small.clear();
        small_bytes = 0;
      };
      for (size_t i : indices) {
        if (owners[i] != r) continue;
        auto& p = params[i];
        const int64_t bytes = p.numel() * p.element_size();
        if (bytes >= kInPlaceBytes && p.is_contiguous()) {
          torch::Tensor target = p.detach();
          pending.push_back(comm->broadcast(target, r, name));
          continue;
        }
        if (small_bytes + bytes > kCoalescedBytes) flush();
        small.push_back(p);
        small_bytes += bytes;
      }
      flush();
    }
  }

  void wait_broadcasts() {
    for (auto& work : pending) work.wait();
    for (auto& c : coalesced) detail::unflatten_into(c.buffer, c.params);
    pending.clear();
    coalesced.clear();
  }
};

ShardedOptimizer::ShardedOptimizer(std::vector<OptimizerParamGroup> groups,
                                   OptimizerFactory factory, std::shared_ptr<Communicator> comm,
                                   int replicas)
    : state_(std::make_unique<State>()) {
  state_->comm = std::move(comm);
  state_->factory = std::move(factory);
  state_->keeps_replicas = replicas > 0;
  state_->lay_out(groups);
}

void ShardedOptimizer::State::lay_out(const std::vector<OptimizerParamGroup>& groups) {
  const int world = comm->info().world_size;
  owned_bytes.assign(world, 0);
  params.clear();
  owners.clear();
  index_by_impl.clear();
  group_sizes.clear();
  const bool keeps_replica = keeps_replicas && world > 1;
  replica_rank = keeps_replica ? (comm->info().rank + world - 1) % world : -1;
  std::vector<OptimizerParamGroup> local_groups;
  std::vector<OptimizerParamGroup> replica_groups;
  for (const auto& group : groups) {
    local_groups.push_back(assign(group, keeps_replica ? &replica_groups : nullptr));
    group_sizes.push_back(group.params().size());
  }
  local = factory(std::move(local_groups));
  TORCH_CHECK(local, "optimizer factory returned null");
  replica = keeps_replica ? factory(std::move(replica_groups)) : nullptr;
}

torch::optim::Optimizer* ShardedOptimizer::PreviousLayout::holder_of(int owner) const {
  if (owner == rank) return local.get();
  return owner == replica_rank ? replica.get() : nullptr;
}

ShardedOptimizer::PreviousLayout ShardedOptimizer::reshard(std::shared_ptr<Communicator> comm) {
  State& s = *state_;
  // The groups as they were given: every parameter, with the options the local optimizer's
  // groups carry (the learning-rate schedule's latest).
  std::vector<OptimizerParamGroup> groups;
  size_t next = 0;
  for (size_t g = 0; g < s.group_sizes.size(); ++g) {
    std::vector<torch::Tensor> members(s.params.begin() + next,
                                       s.params.begin() + next + s.group_sizes[g]);
    next += s.group_sizes[g];
    const auto& local_group = s.local->param_groups().at(g);
    groups.push_back(local_group.has_options()
                         ? OptimizerParamGroup(members, local_group.options().clone())
                         : OptimizerParamGroup(members));
  }
  PreviousLayout previous{std::move(s.local), std::move(s.replica), s.owners, s.comm->info().rank,
                          s.replica_rank};
  s.pending.clear();  // the interrupted step's broadcasts belong to the aborted group
  s.coalesced.clear();
  s.comm = std::move(comm);
  s.lay_out(groups);
  return previous;
}

torch::optim::Optimizer* ShardedOptimizer::keeper_of(int owner) {
  if (owner == state_->comm->info().rank) return state_->local.get();
  return owner == state_->replica_rank ? state_->replica.get() : nullptr;
}

const std::vector<torch::Tensor>& ShardedOptimizer::parameters() const { return state_->params; }

ShardedOptimizer::~ShardedOptimizer() = default;

void ShardedOptimizer::step(const std::function<void()>& after_update) {
  // AdamW through the fused kernel, as the plain optimizer and step_part() do: a run's bits are
  // the same whether its updates were stepped whole or in parts (a healable run steps whole).
  auto step_one = [](torch::optim::Optimizer& optimizer) {
    if (auto* adamw = dynamic_cast<torch::optim::AdamW*>(&optimizer)) {
      detail::fused_adamw_step(*adamw);
    } else {
      optimizer.step();
    }
  };
  step_one(*state_->local);
  if (state_->replica) {
    state_->follow_local_options();
    step_one(*state_->replica);
  }
  ++state_->updated_steps;
  if (after_update) after_update();
  // On the device's timeline: on CUDA the broadcasts queue behind the local step's kernels.
  detail::Timeline& timeline = state_->comm->recorder().timeline();
  const auto start = timeline.mark();
  if (state_->comm->info().world_size > 1) {
    std::vector<size_t> all(state_->params.size());
    std::iota(all.begin(), all.end(), 0);
    state_->launch_broadcasts(all);
    state_->wait_broadcasts();
  }
  const auto end = timeline.mark();
  state_->last_broadcast_seconds = timeline.seconds(end) - timeline.seconds(start);
}

void ShardedOptimizer::step_part(const std::vector<torch::Tensor>& params) {
  auto* adamw = dynamic_cast<torch::optim::AdamW*>(state_->local.get());
  TORCH_CHECK(adamw, "ShardedOptimizer::step_part: the wrapped optimizer must be AdamW");
  std::vector<size_t> indices;
  std::vector<torch::Tensor> owned;
  std::vector<torch::Tensor> replicated;
  for (const auto& p : params) {
    indices.push_back(state_->index_of(p));
    const int owner = state_->owners[indices.back()];
    if (owner == state_->comm->info().rank) owned.push_back(p);
    if (owner == state_->replica_rank) replicated.push_back(p);
  }
  if (!owned.empty()) detail::fused_adamw_step(*adamw, owned);  // empty would mean "all"
  if (!replicated.empty()) {
    state_->follow_local_options();
    auto* replica = dynamic_cast<torch::optim::AdamW*>(state_->replica.get());
    TORCH_CHECK(replica, "ShardedOptimizer::step_part: the replica must be AdamW");
    detail::fused_adamw_step(*replica, replicated);
  }
  if (state_->comm->info().world_size > 1) state_->launch_broadcasts(indices);
}

void ShardedOptimizer::finish_step() {
  ++state_->updated_steps;  // every part's update is done
  detail::Timeline& timeline = state_->comm->recorder().timeline();
  const auto start = timeline.mark();
  state_->wait_broadcasts();
  const auto end = timeline.mark();
  state_->last_broadcast_seconds = timeline.seconds(end) - timeline.seconds(start);
}

void ShardedOptimizer::zero_grad() {
  for (auto& p : state_->params) p.mutable_grad().reset();
}

void ShardedOptimizer::add_param_group(const OptimizerParamGroup& group) {
  std::vector<OptimizerParamGroup> replica_group;
  state_->local->add_param_group(state_->assign(group, state_->replica ? &replica_group : nullptr));
  if (state_->replica) state_->replica->add_param_group(replica_group.at(0));
  state_->group_sizes.push_back(group.params().size());
}

int ShardedOptimizer::owner_of(const torch::Tensor& parameter) const {
  return state_->owners[state_->index_of(parameter)];
}

std::vector<int64_t> ShardedOptimizer::owned_bytes_per_rank() const { return state_->owned_bytes; }

int ShardedOptimizer::replica_of() const { return state_->replica_rank; }

torch::optim::Optimizer* ShardedOptimizer::replica_optimizer() { return state_->replica.get(); }

int64_t ShardedOptimizer::updated_steps() const { return state_->updated_steps; }

void ShardedOptimizer::set_updated_steps(int64_t steps) { state_->updated_steps = steps; }

void ShardedOptimizer::regroup(std::shared_ptr<Communicator> comm) {
  TORCH_CHECK(comm->info().rank == state_->comm->info().rank &&
                  comm->info().world_size == state_->comm->info().world_size,
              "ShardedOptimizer::regroup: a new generation keeps every rank's number");
  // Broadcasts of the interrupted step belong to the aborted group: none is waited for.
  state_->pending.clear();
  state_->coalesced.clear();
  state_->comm = std::move(comm);
}

torch::optim::Optimizer& ShardedOptimizer::local_optimizer() { return *state_->local; }

double ShardedOptimizer::last_broadcast_seconds() const { return state_->last_broadcast_seconds; }

int64_t optimizer_state_bytes(ShardedOptimizer& optimizer) {
  torch::optim::Optimizer* replica = optimizer.replica_optimizer();
  return optimizer_state_bytes(optimizer.local_optimizer()) +
         (replica ? optimizer_state_bytes(*replica) : 0);
}

int64_t optimizer_state_bytes(torch::optim::Optimizer& optimizer) {
  auto bytes = [](const torch::Tensor& t) -> int64_t { return t.defined() ? t.nbytes() : 0; };
  int64_t total = 0;
  for (auto& entry : optimizer.state()) {
    auto* state = entry.second.get();
    if (auto* s = dynamic_cast<torch::optim::AdamWParamState*>(state)) {
      total += bytes(s->exp_avg()) + bytes(s->exp_avg_sq()) + bytes(s->max_exp_avg_sq());
    } else if (auto* s = dynamic_cast<torch::optim::AdamParamState*>(state)) {
      total += bytes(s->exp_avg()) + bytes(s->exp_avg_sq()) + bytes(s->max_exp_avg_sq());
    } else if (auto* s = dynamic_cast<torch::optim::SGDParamState*>(state)) {
      total += bytes(s->momentum_buffer());
    } else if (auto* s = dynamic_cast<torch::optim::AdagradParamState*>(state)) {
      total += bytes(s->sum());
    } else if (auto* s = dynamic_cast<torch::optim::RMSpropParamState*>(state)) {
      total += bytes(s->square_avg()) + bytes(s->momentum_buffer()) + bytes(s->grad_avg());
    }
  }
  return total;
}

}  // namespace ddpd
