// naive: after backward, one blocking all-reduce per parameter gradient, averaged over ranks.
#include "strategies/synchronizer_base.h"

namespace ddpd::detail {
namespace {

class NaiveSynchronizer final : public ReplicatedSynchronizer {
 public:
  using ReplicatedSynchronizer::ReplicatedSynchronizer;
  std::string name() const override { return "naive"; }

  void finish_gradient_synchronization() override {
    for (size_t i = 0; i < params_.size(); ++i) {
      auto& p = params_[i];
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);  // unused this step
      average_async(p.mutable_grad(), "all_reduce/param" + std::to_string(i)).wait();
    }
  }
};

}  // namespace

std::unique_ptr<GradientSynchronizer> make_naive(torch::nn::Module& model,
                                                 std::shared_ptr<Communicator> comm,
                                                 const SyncOptions& options) {
  return std::make_unique<NaiveSynchronizer>(model, std::move(comm), options);
}

}  // namespace ddpd::detail
