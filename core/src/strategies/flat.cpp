// flat: after backward, flatten all gradients into one buffer, one all-reduce, unflatten.
#include "strategies/flat_buffer.h"
#include "strategies/synchronizer_base.h"

namespace ddpd::detail {
namespace {

class FlatSynchronizer final : public ReplicatedSynchronizer {
 public:
  using ReplicatedSynchronizer::ReplicatedSynchronizer;
  std::string name() const override { return "flat"; }

  void finish_gradient_synchronization() override {
    if (params_.empty()) return;
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> grads;
    grads.reserve(params_.size());
    for (auto& p : params_) {
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);  // unused this step
      grads.push_back(p.grad());
    }
    auto flat = flatten(grads);
    average_async(flat, "all_reduce/flat").wait();
    unflatten_into(flat, grads);
  }
};

}  // namespace

std::unique_ptr<GradientSynchronizer> make_flat(torch::nn::Module& model,
                                                std::shared_ptr<Communicator> comm,
                                                const SyncOptions& options) {
  return std::make_unique<FlatSynchronizer>(model, std::move(comm), options);
}

}  // namespace ddpd::detail
