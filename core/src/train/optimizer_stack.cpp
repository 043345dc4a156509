#include "train/optimizer_stack.h"

#include <cmath>
#include <vector>

#include "train/adamw_step.h"

namespace ddpd::detail {

OptimizerStack::OptimizerStack(const DdpJobOptions& options, GradientSynchronizer& sync,
                               std::shared_ptr<Communicator> comm) {
  auto adamw = torch::optim::AdamWOptions(options.lr)
                   .betas({options.beta1, options.beta2})
                   .eps(options.eps)
                   .weight_decay(options.weight_decay);
  steps_per_bucket_ = options.strategy == Strategy::kBucketed && comm->info().world_size > 1 &&
                      options.clip_grad_norm == 0 && !comm->info().device.is_cuda();
  if (options.shard_optimizer) {
    std::vector<torch::optim::OptimizerParamGroup> groups{
        torch::optim::OptimizerParamGroup(sync.optimizer_parameters())};
    sharded_ = std::make_unique<ShardedOptimizer>(std::move(groups), adamw_factory(adamw),
                                                  std::move(comm), options.shard_replicas);
  } else {
    optimizer_ = std::make_unique<torch::optim::AdamW>(sync.optimizer_parameters(), adamw);
    const std::vector<torch::Tensor> replica = replica_parameters(sync);
    if (!replica.empty()) replica_ = std::make_unique<torch::optim::AdamW>(replica, adamw);
  }
}

torch::optim::Optimizer& OptimizerStack::local() {
  return sharded_ ? sharded_->local_optimizer() : *optimizer_;
}

int64_t OptimizerStack::state_bytes() {
  if (sharded_) return optimizer_state_bytes(*sharded_);
  return optimizer_state_bytes(*optimizer_) + (replica_ ? optimizer_state_bytes(*replica_) : 0);
}

void OptimizerStack::set_learning_rate(double lr) {
  for (auto& group : local().param_groups()) {
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  }
  if (replica_) {
    for (auto& group : replica_->param_groups()) {
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
    }
  }
}

double OptimizerStack::finish_synchronization(GradientSynchronizer& sync, Communicator& comm) {
  double overlapped_optimizer_s = 0;
  if (steps_per_bucket_) {
    sync.finish_gradient_synchronization_in_parts([&](const std::vector<torch::Tensor>& params) {
      const double start = comm.recorder().now();
      if (sharded_) {
        sharded_->step_part(params);  // ZeRO-1: the owners step, their broadcasts start
      } else {
        fused_adamw_step(*optimizer_, params);
      }
      overlapped_optimizer_s += comm.recorder().now() - start;
    });
  } else {
    sync.finish_gradient_synchronization();
  }
  return overlapped_optimizer_s;
}

// The arithmetic stays on the gradients' device (float64): one read of the norm at the end,
// where copying every gradient to the host made the step wait on each copy.
double OptimizerStack::clip_gradients(const DdpJobOptions& options, GradientSynchronizer& sync,
                                      Communicator& comm) {
  std::vector<torch::Tensor> grads;
  for (auto& p : sync.optimizer_parameters()) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  const auto on_device = torch::TensorOptions().dtype(torch::kDouble).device(comm.info().device);
  torch::Tensor sum_of_squares = torch::zeros({1}, on_device);
  for (const auto& g : grads) sum_of_squares += g.detach().to(torch::kDouble).pow(2).sum();
  if (options.strategy == Strategy::kFsdp && comm.info().world_size > 1) {
    comm.all_reduce_sum(sum_of_squares, "all_reduce/grad_norm").wait();
  }
  const double norm = std::sqrt(sum_of_squares.item<double>());
  const double coefficient = options.clip_grad_norm / (norm + 1e-6);
  if (coefficient < 1) {
    torch::NoGradGuard no_grad;
    for (auto& g : grads) g.mul_(coefficient);
    // The predecessor scales the same bits by the same coefficient.
    for (auto& p : replica_parameters(sync)) {
      if (p.grad().defined()) p.mutable_grad().mul_(coefficient);
    }
  }
  return norm;
}

double OptimizerStack::step(const std::function<void()>& after_update) {
  if (sharded_) {
    if (steps_per_bucket_) {
      sharded_->finish_step();
    } else {
      sharded_->step(after_update);
    }
    return sharded_->last_broadcast_seconds();
  }
  if (!steps_per_bucket_) {
    fused_adamw_step(*optimizer_);
    if (replica_) fused_adamw_step(*replica_);
  }
  return 0;
}

}  // namespace ddpd::detail
