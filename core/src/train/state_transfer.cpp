#include "train/state_transfer.h"

#include <chrono>
#include <stdexcept>
#include <vector>

#include "strategies/flat_buffer.h"

namespace ddpd::detail {
namespace {

struct Source {
  int rank = -1;
  int64_t completed_steps = -1;
};

// Steps 1 and 2 of the protocol.
Source choose_source(Communicator& comm, int64_t completed_steps) {
  const auto on = torch::TensorOptions().dtype(torch::kLong).device(comm.info().device);
  torch::Tensor mine = torch::full({1}, completed_steps, on);
  torch::Tensor all = torch::empty({comm.info().world_size}, on);
  comm.all_gather(all, mine, "all_gather/heal_completed_steps").wait();
  const auto counts = all.cpu();
  Source source;
  for (int r = 0; r < comm.info().world_size; ++r) {
    const int64_t count = counts[r].item<int64_t>();
    if (count > source.completed_steps) source = {r, count};
  }
  if (source.completed_steps < 0) {
    throw std::runtime_error("healing: no rank of the new group has training state");
  }
  return source;
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

// Steps 3 to 5 for the optimizer state: each parameter's AdamW step, then its moments.
int64_t transfer_optimizer_state(const TrainingState& s, Communicator& comm, int root) {
  const std::vector<torch::Tensor> params = s.sync.optimizer_parameters();
  std::vector<int64_t> steps;
  for (const auto& p : params) {
    const AdamState* adam = adam_state_of(s.local_optimizer, p);
    steps.push_back(adam ? adam->step() : -1);
  }
  const torch::Tensor agreed = broadcast_longs(comm, steps, static_cast<int64_t>(params.size()),
                                               root, "broadcast/heal_adam_steps");
  auto& state = s.local_optimizer.state();
  std::vector<torch::Tensor> moments;
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t step = agreed[static_cast<int64_t>(i)].item<int64_t>();
    const torch::Tensor& p = params[i];
    if (step < 0) {
      state.erase(p.unsafeGetTensorImpl());
      continue;
    }
    AdamState* adam = adam_state_of(s.local_optimizer, p);
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
  broadcast_in_chunks(comm, moments, root, "broadcast/heal_adam_moments");
  int64_t bytes = 0;
  for (const auto& m : moments) bytes += m.nbytes();
  return bytes;
}

int64_t module_state_bytes(torch::nn::Module& module) {
  int64_t bytes = 0;
  for (const auto& p : unique_parameters(module)) bytes += p.nbytes();
  for (const auto& b : module.buffers(/*recurse=*/true)) bytes += b.nbytes();
  return bytes;
}

}  // namespace

TransferredState transfer_training_state(const TrainingState& s, std::shared_ptr<Communicator> comm,
                                         int64_t completed_steps,
                                         const AfterParameters& after_parameters) {
  const auto start = std::chrono::steady_clock::now();
  Communicator& c = *comm;
  const Source source = choose_source(c, completed_steps);
  const bool is_source = c.info().rank == source.rank;
  const std::vector<int64_t> order = is_source ? s.sync.launch_order() : std::vector<int64_t>{};
  const int64_t order_size = broadcast_longs(c, {static_cast<int64_t>(order.size())}, 1,
                                             source.rank, "broadcast/heal_order_size")[0]
                                 .item<int64_t>();
  const torch::Tensor agreed_order =
      broadcast_longs(c, order, order_size, source.rank, "broadcast/heal_launch_order");
  std::vector<int64_t> launch_order(order_size);
  for (int64_t k = 0; k < order_size; ++k) launch_order[k] = agreed_order[k].item<int64_t>();
  s.sync.regroup(std::move(comm), launch_order);

  TransferredState out;
  out.source_rank = source.rank;
  out.completed_steps = source.completed_steps;
  broadcast_module_state(s.model, c, source.rank);
  out.bytes = module_state_bytes(s.model);
  if (after_parameters) after_parameters(source.completed_steps);
  out.bytes += transfer_optimizer_state(s, c, source.rank);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace ddpd::detail
