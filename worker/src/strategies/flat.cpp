// flat: after backward, flatten all gradients into one buffer, one all-reduce, unflatten.
#include "strategies/synchronizer_base.h"

namespace ddpd::detail {
namespace {

class FlatSynchronizer final : public ReplicatedSynchronizer {
 public:
  using ReplicatedSynchronizer::ReplicatedSynchronizer;
  Strategy strategy() const override { return Strategy::kFlat; }

  void finish_gradient_synchronization() override {
    if (params_.empty()) return;
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> views;
    views.reserve(params_.size());
    for (auto& p : params_) {
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);  // unused this step
      views.push_back(p.grad().reshape({-1}));
    }
    auto flat = torch::cat(views);
    comm_->all_reduce_sum(flat, "all_reduce/flat").wait();
    flat.div_(static_cast<double>(comm_->world_size()));
    int64_t offset = 0;
    for (auto& p : params_) {
      p.mutable_grad().copy_(flat.narrow(0, offset, p.numel()).view_as(p));
      offset += p.numel();
    }
  }
};

}  // namespace

std::unique_ptr<GradientSynchronizer> make_flat(torch::nn::Module& model,
                                                std::shared_ptr<Communicator> comm) {
  return std::make_unique<FlatSynchronizer>(model, std::move(comm));
}

}  // namespace ddpd::detail
