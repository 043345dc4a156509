// overlap: an asynchronous all-reduce per parameter, launched from gradient-ready hooks during
// backward; finish_gradient_synchronization() waits.
//
// Launch order: every rank launches in one agreed order (c10d matches collectives by order), so
// a parameter's all-reduce starts once it and every parameter before it in the order are ready.
// The first step uses reverse registration order; after it, rank 0's observed ready order is
// broadcast and adopted (unless --static-buckets), so launches follow backward as it runs.
// Under gradient accumulation the hooks launch only in the backward that synchronises.
#include "strategies/synchronizer_base.h"

namespace ddpd::detail {
namespace {

class OverlapSynchronizer final : public ReplicatedSynchronizer {
 public:
  OverlapSynchronizer(torch::nn::Module& model, std::shared_ptr<Communicator> comm,
                      const SyncOptions& options)
      : ReplicatedSynchronizer(model, std::move(comm), options),
        pending_(params_.size()),
        ready_(params_.size(), 0),
        hooks_(params_, [this](size_t i) { mark_ready(i); }) {
    // A resumed run launches in the order the checkpointed run had agreed on.
    launch_order_ = launch_order_from(options.launch_order, order_agreed_);
    synchronized_once_ = order_agreed_;
  }

  std::string name() const override { return "overlap"; }

  void finish_gradient_synchronization() override {
    check_every_gradient_ready(ready_);
    // Parameters without a gradient this step (--find-unused-parameters) are reduced as zeros,
    // in the agreed order like the rest.
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!params_[i].grad().defined()) params_[i].mutable_grad() = torch::zeros_like(params_[i]);
    }
    while (next_to_launch_ < launch_order_.size()) launch(launch_order_[next_to_launch_++]);
    for (auto& work : pending_) work.wait();
    next_to_launch_ = 0;
    std::fill(ready_.begin(), ready_.end(), 0);
    synchronized_once_ = true;
  }

  void after_optimizer_step() override {
    if (options_.static_buckets || order_agreed_ || !synchronized_once_) return;
    launch_order_ = agree_on_ready_order(recorded_ready_order_);
    order_agreed_ = true;
  }

  std::vector<int64_t> launch_order() const override {
    if (!order_agreed_) return {};
    return {launch_order_.begin(), launch_order_.end()};
  }

  void regroup(std::shared_ptr<Communicator> comm,
               const std::vector<int64_t>& launch_order) override {
    ReplicatedSynchronizer::regroup(std::move(comm), launch_order);
    for (auto& work : pending_) work = PendingGradientAverage();
    std::fill(ready_.begin(), ready_.end(), 0);
    next_to_launch_ = 0;
    recorded_ready_order_.clear();
    launch_order_ = launch_order_from(launch_order, order_agreed_);
    synchronized_once_ = order_agreed_;
  }

 private:
  void mark_ready(size_t i) {
    if (!sync_on_backward() || ready_[i]) return;  // accumulating
    ready_[i] = 1;
    if (!order_agreed_) recorded_ready_order_.push_back(i);
    // Launch in the agreed order only: every rank issues the same sequence.
    while (next_to_launch_ < launch_order_.size() && ready_[launch_order_[next_to_launch_]]) {
      launch(launch_order_[next_to_launch_++]);
    }
  }

  void launch(size_t i) {
    pending_[i] = average_async(params_[i].mutable_grad(), "all_reduce/param" + std::to_string(i));
  }

  std::vector<PendingGradientAverage> pending_;
  std::vector<char> ready_;                   // gradient accumulated in this backward, by param
  std::vector<size_t> launch_order_;          // parameter indices, the same on every rank
  size_t next_to_launch_ = 0;                 // position in launch_order_
  std::vector<size_t> recorded_ready_order_;  // the first step's, until the order is agreed
  bool synchronized_once_ = false;
  bool order_agreed_ = false;
  GradReadyHooks hooks_;  // last: removed before the state its callbacks touch
};

}  // namespace

std::unique_ptr<GradientSynchronizer> make_overlap(torch::nn::Module& model,
                                                   std::shared_ptr<Communicator> comm,
                                                   const SyncOptions& options) {
  return std::make_unique<OverlapSynchronizer>(model, std::move(comm), options);
}

}  // namespace ddpd::detail
