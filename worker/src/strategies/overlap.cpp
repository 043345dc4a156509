// overlap: an asynchronous all-reduce per parameter, launched from a gradient-ready hook the
// moment that parameter's gradient is accumulated; finish_gradient_synchronization() waits.
#include "strategies/synchronizer_base.h"

namespace ddpd::detail {
namespace {

class OverlapSynchronizer final : public ReplicatedSynchronizer {
 public:
  OverlapSynchronizer(torch::nn::Module& model, std::shared_ptr<Communicator> comm)
      : ReplicatedSynchronizer(model, std::move(comm)),
        pending_(params_.size()),
        launched_(params_.size(), false),
        hooks_(params_, [this](size_t i) { launch(i); }) {}

  std::string name() const override { return "overlap"; }

  void finish_gradient_synchronization() override {
    // Parameters unused in this forward never fired their hook: reduce zeros for them, in
    // registration order so every rank launches the same sequence.
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!launched_[i]) {
        params_[i].mutable_grad() = torch::zeros_like(params_[i]);
        launch(i);
      }
    }
    for (auto& work : pending_) work.wait();
    std::fill(launched_.begin(), launched_.end(), false);
    average_gradients();
  }

 private:
  void launch(size_t i) {
    if (comm_->world_size() > 1) {
      pending_[i] =
          comm_->all_reduce_sum(params_[i].mutable_grad(), "all_reduce/param" + std::to_string(i));
    }
    launched_[i] = true;
  }

  std::vector<PendingCollective> pending_;
  std::vector<bool> launched_;
  GradReadyHooks hooks_;  // last: removed before the state its callbacks touch
};

}  // namespace

std::unique_ptr<GradientSynchronizer> make_overlap(torch::nn::Module& model,
                                                   std::shared_ptr<Communicator> comm) {
  return std::make_unique<OverlapSynchronizer>(model, std::move(comm));
}

}  // namespace ddpd::detail
