// flat: after backward, flatten all gradients into one buffer, one all-reduce, unflatten. The
// buffer is kept across steps in memory every rank maps where the transport has it (shm: the
// all-reduce then reads the peers' gradients in place, docs/shm-transport.md); gradients of
// mixed dtypes take a fresh torch::cat buffer instead.
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
    torch::Tensor flat = flat_buffer(grads);
    average_async(flat, "all_reduce/flat").wait();
    unflatten_into(flat, grads);
  }

 private:
  // The gradients flattened: into the kept buffer (allocated collectively at the first step,
  // the same on every rank), or a new one when their dtypes differ.
  torch::Tensor flat_buffer(const std::vector<torch::Tensor>& grads) {
    int64_t numel = 0;
    for (const auto& g : grads) {
      if (g.scalar_type() != grads.front().scalar_type()) return flatten(grads);
      numel += g.numel();
    }
    if (!kept_.defined()) {
      kept_ = comm_->allocate_collective_buffer(numel, grads.front().options());
    }
    flatten_into(grads, kept_);
    return kept_;
  }

  torch::Tensor kept_;
};

}  // namespace

std::unique_ptr<GradientSynchronizer> make_flat(torch::nn::Module& model,
                                                std::shared_ptr<Communicator> comm,
                                                const SyncOptions& options) {
  return std::make_unique<FlatSynchronizer>(model, std::move(comm), options);
}

}  // namespace ddpd::detail
