// overlap: an asynchronous all-reduce per parameter, launched from a gradient-ready hook the
// moment that parameter's gradient is accumulated; finish_gradient_synchronization() waits.
// Under gradient accumulation the hooks launch only in the backward that synchronises, when
// each gradient holds the sum over the step's micro-batches.
#include "strategies/synchronizer_base.h"

namespace ddpd::detail {
namespace {

class OverlapSynchronizer final : public ReplicatedSynchronizer {
 public:
  OverlapSynchronizer(torch::nn::Module& model, std::shared_ptr<Communicator> comm,
                      WireDtype gradient_wire)
      : ReplicatedSynchronizer(model, std::move(comm), gradient_wire),
        pending_(params_.size()),
        launched_(params_.size(), false),
        hooks_(params_, [this](size_t i) {
          if (sync_on_backward()) launch(i);
        }) {}

  std::string name() const override { return "overlap"; }

  void finish_gradient_synchronization() override {
    // Parameters unused in this backward never fired their hook: reduce what they hold (zeros
    // if no micro-batch used them), in registration order so every rank launches the same
    // sequence.
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!launched_[i]) {
        if (!params_[i].grad().defined()) params_[i].mutable_grad() = torch::zeros_like(params_[i]);
        launch(i);
      }
    }
    for (auto& work : pending_) work.wait();
    std::fill(launched_.begin(), launched_.end(), false);
  }

 private:
  void launch(size_t i) {
    pending_[i] = average_async(params_[i].mutable_grad(), "all_reduce/param" + std::to_string(i));
    launched_[i] = true;
  }

  std::vector<PendingGradientAverage> pending_;
  std::vector<bool> launched_;
  GradReadyHooks hooks_;  // last: removed before the state its callbacks touch
};

}  // namespace

std::unique_ptr<GradientSynchronizer> make_overlap(torch::nn::Module& model,
                                                   std::shared_ptr<Communicator> comm,
                                                   const SyncOptions& options) {
  return std::make_unique<OverlapSynchronizer>(model, std::move(comm), options.gradient_wire);
}

}  // namespace ddpd::detail
