// fsdp: parameters, gradients and optimizer state sharded. Each trainable parameter is
// flattened and right-padded to a multiple of N; rank r keeps elements [r·L/N, (r+1)·L/N).
// Per step: prepare_forward() all-gathers every parameter into its module tensor (the whole
// model is one FSDP unit), backward fills full gradients, finish_gradient_synchronization()
// reduce-scatters each gradient into this rank's shard (divided by N) and frees the full
// parameters and gradients, and the optimizer steps the shards.
//
// Gradient accumulation keeps the full parameters gathered once for the whole step and
// accumulates unsharded gradients across the micro-batches (as PyTorch FSDP's no_sync()): one
// reduce-scatter per step, so the bytes per optimizer step do not change with K. It costs one
// full gradient per rank for the step, which the whole-model unit holds during any backward
// anyway, so accumulation adds no memory here.
#include "strategies/synchronizer_base.h"

namespace ddpd::detail {
namespace {

struct ShardedParameter {
  torch::Tensor param;  // the module's tensor: full data between prepare_forward and finish
  std::vector<int64_t> shape;
  ShardLayout layout;
  torch::Tensor shard;  // this rank's slice (a leaf the optimizer updates)
};

class FsdpSynchronizer final : public GradientSynchronizer {
 public:
  FsdpSynchronizer(torch::nn::Module& model, std::shared_ptr<Communicator> comm)
      : model_(model), comm_(std::move(comm)) {
    broadcast_module_state(model_, *comm_);
    torch::NoGradGuard no_grad;
    const int n = comm_->world_size();
    const int64_t rank = comm_->rank();
    for (auto& p : unique_trainable_parameters(model_)) {
      ShardedParameter s;
      s.param = p;
      s.shape = p.sizes().vec();
      s.layout = shard_layout(p.numel(), n);
      auto padded = torch::zeros({s.layout.padded_numel}, p.options());
      padded.narrow(0, 0, p.numel()).copy_(p.reshape({-1}));
      s.shard = padded.narrow(0, rank * s.layout.shard_numel, s.layout.shard_numel)
                    .clone()
                    .set_requires_grad(true);
      shards_.push_back(std::move(s));
    }
    release_full_parameters();
  }

  std::string name() const override { return "fsdp"; }

  void prepare_forward() override { gather_full_parameters(); }
  void end_forward_only() override { release_full_parameters(); }

  void finish_gradient_synchronization() override {
    torch::NoGradGuard no_grad;
    const double n = comm_->world_size();
    for (size_t i = 0; i < shards_.size(); ++i) {
      auto& s = shards_[i];
      auto padded = torch::zeros({s.layout.padded_numel}, s.param.options());
      if (s.param.grad().defined()) {
        padded.narrow(0, 0, s.layout.numel).copy_(s.param.grad().reshape({-1}));
      }
      auto grad_shard = torch::empty({s.layout.shard_numel}, s.param.options());
      comm_->reduce_scatter_sum(grad_shard, padded, "reduce_scatter/param" + std::to_string(i));
      s.shard.mutable_grad() = grad_shard.div_(n);
    }
    release_full_parameters();
  }

  std::vector<torch::Tensor> optimizer_parameters() override {
    std::vector<torch::Tensor> out;
    for (auto& s : shards_) out.push_back(s.shard);
    return out;
  }

  std::vector<torch::Tensor> full_parameters() override {
    gather_full_parameters();
    std::vector<torch::Tensor> out;
    for (auto& p : unique_parameters(model_)) out.push_back(p.detach().clone());
    release_full_parameters();
    return out;
  }

 private:
  void gather_full_parameters() {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> gathered;
    std::vector<PendingCollective> pending;
    for (size_t i = 0; i < shards_.size(); ++i) {
      auto& s = shards_[i];
      gathered.push_back(torch::empty({s.layout.padded_numel}, s.shard.options()));
      pending.push_back(comm_->all_gather(gathered.back(), s.shard.detach(),
                                          "all_gather/param" + std::to_string(i)));
    }
    for (size_t i = 0; i < shards_.size(); ++i) {
      pending[i].wait();
      auto& s = shards_[i];
      s.param.set_data(gathered[i].narrow(0, 0, s.layout.numel).view(s.shape));
    }
  }

  // Between steps only the shards hold parameter memory.
  void release_full_parameters() {
    for (auto& s : shards_) {
      s.param.mutable_grad().reset();
      s.param.set_data(torch::empty({0}, s.param.options()));
    }
  }

  torch::nn::Module& model_;
  std::shared_ptr<Communicator> comm_;
  std::vector<ShardedParameter> shards_;
};

}  // namespace

std::unique_ptr<GradientSynchronizer> make_fsdp(torch::nn::Module& model,
                                                std::shared_ptr<Communicator> comm) {
  return std::make_unique<FsdpSynchronizer>(model, std::move(comm));
}

}  // namespace ddpd::detail
