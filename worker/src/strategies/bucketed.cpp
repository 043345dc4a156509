// bucketed: parameters are packed, in reverse registration order, into buckets of at most
// bucket_size_mb; a bucket's asynchronous all-reduce starts as soon as all its gradients are
// ready (from gradient-ready hooks during backward); finish_gradient_synchronization() waits.
//
// Gradients live as views into their bucket's flat buffer (PyTorch DDP's
// gradient_as_bucket_view): autograd accumulates straight into the bucket, so there is no copy
// in or out, and zero_grad() zeroes the buffers instead of dropping the gradients. Under gradient
// accumulation the micro-batches' gradients sum in the buckets; only the backward that
// synchronises counts readiness and launches.
#include "strategies/synchronizer_base.h"

namespace ddpd::detail {
namespace {

struct Bucket {
  std::vector<size_t> params;  // indices into params_
  torch::Tensor buffer;        // flat, holds the gradients of `params`
  size_t ready = 0;            // gradients accumulated this backward
  PendingGradientAverage work;
};

class BucketedSynchronizer final : public ReplicatedSynchronizer {
 public:
  BucketedSynchronizer(torch::nn::Module& model, std::shared_ptr<Communicator> comm,
                       double bucket_size_mb, WireDtype gradient_wire)
      : ReplicatedSynchronizer(model, std::move(comm), gradient_wire),
        bucket_of_(params_.size()),
        grad_views_(params_.size()) {
    std::vector<int64_t> numels;
    for (const auto& p : params_) numels.push_back(p.numel());
    const auto cap = static_cast<int64_t>(bucket_size_mb * 1024.0 * 1024.0);
    const int64_t element_size = params_.empty() ? 4 : params_.front().element_size();
    torch::NoGradGuard no_grad;
    for (auto& indices : assign_buckets(numels, element_size, std::max<int64_t>(cap, 1))) {
      Bucket bucket;
      int64_t total = 0;
      for (size_t i : indices) total += params_[i].numel();
      bucket.buffer = torch::zeros({total}, params_[indices.front()].options());
      int64_t offset = 0;
      for (size_t i : indices) {
        auto& p = params_[i];
        grad_views_[i] = bucket.buffer.narrow(0, offset, p.numel()).view(p.sizes());
        p.mutable_grad() = grad_views_[i];
        bucket_of_[i] = buckets_.size();
        offset += p.numel();
      }
      bucket.params = std::move(indices);
      buckets_.push_back(std::move(bucket));
    }
    hooks_ = std::make_unique<GradReadyHooks>(params_, [this](size_t i) { mark_ready(i); });
  }

  ~BucketedSynchronizer() override { hooks_.reset(); }

  std::string name() const override { return "bucketed"; }

  void zero_grad() override {
    for (auto& bucket : buckets_) bucket.buffer.zero_();
  }

  void finish_gradient_synchronization() override {
    // Buckets holding parameters unused in this forward were never completed: their gradient
    // views are still zero, so launch them as they are, in order.
    while (next_to_launch_ < buckets_.size()) launch(buckets_[next_to_launch_++]);
    next_to_launch_ = 0;
    for (auto& bucket : buckets_) {
      bucket.work.wait();
      bucket.ready = 0;
    }
  }

 private:
  void mark_ready(size_t i) {
    Bucket& bucket = buckets_[bucket_of_[i]];
    auto& p = params_[i];
    // Someone reset .grad (an optimizer's zero_grad, say), so autograd stored a fresh tensor:
    // move it into the bucket and restore the view.
    if (!p.grad().defined() || p.grad().data_ptr() != grad_views_[i].data_ptr()) {
      torch::NoGradGuard no_grad;
      if (p.grad().defined()) grad_views_[i].copy_(p.grad());
      p.mutable_grad() = grad_views_[i];
    }
    if (!sync_on_backward()) return;  // accumulating: the gradient stays in its bucket
    ++bucket.ready;
    // Launch in bucket order only: c10d matches collectives by order, and every rank must issue
    // the same sequence even if its gradients became ready in another order.
    while (next_to_launch_ < buckets_.size() &&
           buckets_[next_to_launch_].ready == buckets_[next_to_launch_].params.size()) {
      launch(buckets_[next_to_launch_++]);
    }
  }

  void launch(Bucket& bucket) {
    bucket.work =
        average_async(bucket.buffer, "all_reduce/bucket" + std::to_string(&bucket - &buckets_[0]));
  }

  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;
  std::vector<torch::Tensor> grad_views_;  // each parameter's slot in its bucket
  size_t next_to_launch_ = 0;
  std::unique_ptr<GradReadyHooks> hooks_;
};

}  // namespace

std::unique_ptr<GradientSynchronizer> make_bucketed(torch::nn::Module& model,
                                                    std::shared_ptr<Communicator> comm,
                                                    const SyncOptions& options) {
  return std::make_unique<BucketedSynchronizer>(model, std::move(comm), options.bucket_size_mb,
                                                options.gradient_wire);
}

}  // namespace ddpd::detail
