// Private helpers shared by the strategy implementations.
#pragma once

#include <torch/csrc/autograd/function.h>

#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "ddpd/core/grad_sync.h"
#include "ddpd/core/model.h"

namespace ddpd::detail {

// One gradient buffer's all-reduce in flight. wait() leaves the average over ranks in the
// buffer: the fp32 sum divided by N, or (compressed) the fp16/bf16 sum of gradients already
// divided by N, cast back into the fp32 buffer.
class PendingGradientAverage {
 public:
  PendingGradientAverage() = default;
  PendingGradientAverage(PendingCollective work, torch::Tensor gradient, torch::Tensor wire,
                         double world_size);
  void wait();

 private:
  PendingCollective work_;
  torch::Tensor gradient_;  // fp32, what the optimizer reads
  torch::Tensor wire_;      // compressed copy on the wire; undefined for fp32
  double world_size_ = 1;
};

// Strategies whose parameters stay whole (replicated) on every rank.
class ReplicatedSynchronizer : public GradientSynchronizer, public Regrouping {
 public:
  ReplicatedSynchronizer(torch::nn::Module& model, std::shared_ptr<Communicator> comm,
                         const SyncOptions& options = {});

  std::vector<torch::Tensor> optimizer_parameters() override { return params_; }
  std::vector<torch::Tensor> full_parameters() override;
  void visit_full_parameters(
      const std::function<void(const std::vector<torch::Tensor>&)>& visit) override {
    visit(unique_parameters(model_));  // already whole: no copy
  }
  // The whole model's parameters, and a full gradient for every trainable one.
  UnshardedPeak step_peak_unsharded() const override;
  Regrouping* regrouping() override { return this; }
  // None; overlap and bucketed agree on one after the first step.
  std::vector<int64_t> launch_order() const override { return {}; }
  // Takes `comm`; the strategies with a launch order override it and call it first.
  void regroup(std::shared_ptr<Communicator> comm,
               const std::vector<int64_t>& launch_order) override;

 protected:
  // Starts averaging `gradient` over ranks in the job's wire dtype (named `name` in the journal
  // and timeline). `gradient` must stay alive until wait().
  PendingGradientAverage average_async(torch::Tensor& gradient, const std::string& name);

  // For the strategies that wait for gradient readiness (overlap, bucketed):
  // Throws naming every parameter whose ready flag is not set, unless find_unused_parameters.
  void check_every_gradient_ready(const std::vector<char>& ready) const;
  // The launch order every rank adopts after the first step: rank 0's recorded ready order,
  // completed with the parameters that never became ready (reverse registration order), and
  // broadcast from rank 0 (a collective).
  std::vector<size_t> agree_on_ready_order(const std::vector<size_t>& recorded);
  // The order to launch in: `agreed_order` (a resumed run's SyncOptions::launch_order, or a
  // heal source's launch_order()) when it orders params_ (each index once) and the order is not
  // static; else reverse registration order, and `agreed` false.
  std::vector<size_t> launch_order_from(const std::vector<int64_t>& agreed_order,
                                        bool& agreed) const;

  torch::nn::Module& model_;
  std::shared_ptr<Communicator> comm_;
  std::vector<torch::Tensor> params_;     // unique trainable parameters, registration order
  std::vector<std::string> param_names_;  // their names in the module
  SyncOptions options_;
};

// Registers a callback on each parameter's gradient accumulator: it runs right after the
// parameter's gradient for this backward has been accumulated into .grad (how c10d's Reducer
// detects readiness). Not register_post_accumulate_grad_hook: in LibTorch 2.11's C++ API that is
// one slot per tensor, meant for Python's hooks (autograd/variable.h, set_post_acc_grad_hooks),
// where accumulator post-hooks stack and come off by key. Removes the hooks on destruction. Thread
// contract: callbacks run on autograd's thread.
class GradReadyHooks {
 public:
  GradReadyHooks(const std::vector<torch::Tensor>& params, std::function<void(size_t)> on_ready);
  ~GradReadyHooks();
  GradReadyHooks(const GradReadyHooks&) = delete;
  GradReadyHooks& operator=(const GradReadyHooks&) = delete;

 private:
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<uintptr_t> keys_;
};

std::unique_ptr<GradientSynchronizer> make_naive(torch::nn::Module&, std::shared_ptr<Communicator>,
                                                 const SyncOptions&);
std::unique_ptr<GradientSynchronizer> make_flat(torch::nn::Module&, std::shared_ptr<Communicator>,
                                                const SyncOptions&);
std::unique_ptr<GradientSynchronizer> make_overlap(torch::nn::Module&,
                                                   std::shared_ptr<Communicator>,
                                                   const SyncOptions&);
std::unique_ptr<GradientSynchronizer> make_bucketed(torch::nn::Module&,
                                                    std::shared_ptr<Communicator>,
                                                    const SyncOptions&);
std::unique_ptr<GradientSynchronizer> make_fsdp(torch::nn::Module&, std::shared_ptr<Communicator>,
                                                const SyncOptions&);

}  // namespace ddpd::detail
