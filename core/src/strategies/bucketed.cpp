// bucketed: parameters are packed into buckets of at most bucket_size_mb (the first of at most
// first_bucket_mb, 1 MiB, so the first all-reduce starts early); a bucket's asynchronous
// all-reduce starts as soon as all its gradients are ready (from gradient-ready hooks during
// backward); finish_gradient_synchronization() waits.
//
// Bucket order, as c10d's Reducer: the first step packs parameters in reverse registration order
// (roughly the order backward produces their gradients). After it, rank 0's observed ready order
// is broadcast and every rank rebuilds its buckets in that order (unless --static-buckets), so
// buckets fill in the order backward actually fills them.
//
// Gradients live as views into their bucket's flat buffer (PyTorch DDP's
// gradient_as_bucket_view): after a parameter's first gradient of a step, autograd accumulates
// straight into the bucket, and nothing is copied out. zero_grad() drops the gradients rather
// than zeroing the buckets: autograd then stores a parameter's first gradient as a fresh tensor,
// which mark_ready copies into its view. That copy writes the view once, where zeroing wrote
// every bucket and the accumulation then read the zeros: 2-rank step 205.5 -> 202.6 ms (medians
// of 4 alternating runs; zero_grad had taken 4.0-4.6 ms for 37 MB). Under gradient accumulation
// the micro-batches' gradients sum in the buckets; only the backward that synchronises counts
// readiness and launches.
#include "strategies/synchronizer_base.h"

#include "ddpd/core/collective_buffers.h"

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
                       const SyncOptions& options)
      : ReplicatedSynchronizer(model, std::move(comm), options),
        bucket_of_(params_.size()),
        grad_views_(params_.size()),
        ready_(params_.size(), 0) {
    // A resumed run builds its buckets as the checkpointed run had rebuilt them: a ring
    // all-reduce's summation order follows each element's place in its bucket, so another layout
    // for the first step after a resume changed its sums by an ulp over Gloo at world 3.
    const std::vector<size_t> order = launch_order_from(options.launch_order, rebuilt_);
    synchronized_once_ = rebuilt_;
    // Allocating buckets is a collective over shm: a rank that joins makes them in regroup().
    if (!options.joins_running_job) build_buckets(order);
    hooks_ = std::make_unique<GradReadyHooks>(params_, [this](size_t i) { mark_ready(i); });
  }

  ~BucketedSynchronizer() override { hooks_.reset(); }

  std::string name() const override { return "bucketed"; }

  void zero_grad() override {
    for (auto& p : params_) p.mutable_grad().reset();
  }

  void finish_gradient_synchronization() override {
    finish_gradient_synchronization_in_parts([](const std::vector<torch::Tensor>&) {});
  }

  void finish_gradient_synchronization_in_parts(
      const std::function<void(const std::vector<torch::Tensor>&)>& on_averaged) override {
    check_every_gradient_ready(ready_);
    zero_views_without_gradient();
    // Buckets holding parameters without a gradient this step (--find-unused-parameters) were
    // never completed: their unused views are zero now, so launch them as they are, in order.
    while (next_to_launch_ < buckets_.size()) launch(buckets_[next_to_launch_++]);
    next_to_launch_ = 0;
    std::vector<torch::Tensor> averaged;
    for (auto& bucket : buckets_) {
      bucket.work.wait();
      bucket.ready = 0;
      averaged.clear();
      for (size_t i : bucket.params) averaged.push_back(params_[i]);
      on_averaged(averaged);  // later buckets stay in flight meanwhile
    }
    std::fill(ready_.begin(), ready_.end(), 0);
    synchronized_once_ = true;
  }

  // The rebuild runs after the first optimizer step, once the averaged gradients are consumed;
  // the next zero_grad drops the views into the new buckets, as it does every step.
  void after_optimizer_step() override {
    if (options_.static_buckets || rebuilt_ || !synchronized_once_) return;
    build_buckets(agree_on_ready_order(recorded_ready_order_));
    rebuilt_ = true;
  }

  std::vector<int64_t> launch_order() const override {
    if (!rebuilt_) return {};
    return {bucket_order_.begin(), bucket_order_.end()};
  }

  // The buckets are made again over the new group (over shm their buffers live in its memory),
  // in the same layout: a ring all-reduce's summation order follows each element's place.
  void regroup(std::shared_ptr<Communicator> comm,
               const std::vector<int64_t>& launch_order) override {
    ReplicatedSynchronizer::regroup(std::move(comm), launch_order);
    std::fill(ready_.begin(), ready_.end(), 0);
    next_to_launch_ = 0;
    recorded_ready_order_.clear();
    build_buckets(launch_order_from(launch_order, rebuilt_));
    synchronized_once_ = rebuilt_;
  }

 private:
  void build_buckets(const std::vector<size_t>& order) {
    bucket_order_ = order;
    std::vector<int64_t> numels;
    for (const auto& p : params_) numels.push_back(p.numel());
    constexpr double kMiB = 1024.0 * 1024.0;
    const auto cap = std::max<int64_t>(1, static_cast<int64_t>(options_.bucket_size_mb * kMiB));
    const auto first_cap = std::max<int64_t>(
        1,
        static_cast<int64_t>(std::min(options_.first_bucket_mb, options_.bucket_size_mb) * kMiB));
    const int64_t element_size = params_.empty() ? 4 : params_.front().element_size();
    torch::NoGradGuard no_grad;
    buckets_.clear();
    for (auto& indices : assign_buckets(order, numels, element_size, cap, first_cap)) {
      Bucket bucket;
      int64_t total = 0;
      for (size_t i : indices) total += params_[i].numel();
      // Over shm, in memory the peers map: the all-reduce reads it in place (no copy in).
      bucket.buffer = allocate_collective_buffer(*comm_, total, params_[indices.front()].options());
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
  }

  // A parameter without a gradient since zero_grad (unused, under --find-unused-parameters)
  // has last step's average in its view: it is reduced, and stepped, as zeros.
  void zero_views_without_gradient() {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i) {
      auto& p = params_[i];
      // A ready one's bucket may be on the wire: its view is this step's, whatever .grad is.
      if (ready_[i]) continue;
      if (p.grad().defined() && p.grad().data_ptr() == grad_views_[i].data_ptr()) continue;
      grad_views_[i].zero_();
      p.mutable_grad() = grad_views_[i];
    }
  }

  void mark_ready(size_t i) {
    Bucket& bucket = buckets_[bucket_of_[i]];
    auto& p = params_[i];
    // The first gradient since a zero_grad (ours or an optimizer's): autograd stored a fresh
    // tensor, so move it into the bucket and restore the view.
    if (!p.grad().defined() || p.grad().data_ptr() != grad_views_[i].data_ptr()) {
      torch::NoGradGuard no_grad;
      if (p.grad().defined()) {
        grad_views_[i].copy_(p.grad());
      } else {
        grad_views_[i].zero_();
      }
      p.mutable_grad() = grad_views_[i];
    }
    if (!sync_on_backward() || ready_[i]) return;  // accumulating: it stays in its bucket
    ready_[i] = 1;
    if (!rebuilt_) recorded_ready_order_.push_back(i);
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
  std::vector<char> ready_;                // gradient accumulated in this backward, by param
  size_t next_to_launch_ = 0;
  std::vector<size_t> recorded_ready_order_;  // the first step's, until the rebuild
  std::vector<size_t> bucket_order_;          // the buckets' parameters, in launch order
  bool synchronized_once_ = false;
  bool rebuilt_ = false;
  std::unique_ptr<GradReadyHooks> hooks_;
};

}  // namespace

std::unique_ptr<GradientSynchronizer> make_bucketed(torch::nn::Module& model,
                                                    std::shared_ptr<Communicator> comm,
                                                    const SyncOptions& options) {
  return std::make_unique<BucketedSynchronizer>(model, std::move(comm), options);
}

}  // namespace ddpd::detail
