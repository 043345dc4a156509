// A c10d backend that wraps another, as PyTorch's ProcessGroupWrapper wraps a process group for
// TORCH_DISTRIBUTED_DEBUG: every collective the Communicator launches passes through
// intercept() first, then goes to the wrapped backend. The debug features are such wrappers
// (Communicator's constructor stacks them), so the Communicator itself knows none of them:
//   - comm/collective_check.h: DesyncCheckBackend, --check-collectives;
//   - comm/skip_injection.h: SkipInjectingBackend, --inject skip-collective.
// Only the collectives the Communicator and its Gloo fallbacks (comm/gloo_fallbacks.h) launch
// are forwarded; shutdown() and abort() go to the wrapped backend.
// Thread contract: intercept() runs on the launching thread, under the Communicator's launch
// mutex, so collectives pass through in launch order.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <cstdint>
#include <functional>

namespace ddpd::detail {

// One collective as it is launched: what the wrappers see of it.
struct LaunchedCollective {
  // all_reduce | broadcast | all_gather | reduce_scatter | barrier (the Gloo fallbacks' list
  // all-gather is an all_gather). alltoall_base keeps the reduce_scatter label from when fsdp's
  // Gloo reduce-scatter was an all-to-all; since the pairwise one (pairwise_reduce_scatter.h)
  // nothing in core launches it.
  const char* op;
  int64_t numel;  // of the input; 0 for a barrier
  at::ScalarType dtype;
};

// Launches a collective c10d's Backend has no call for (the shm backend's reduce-scatter that
// keeps the predecessor's sum) on `backend` through its wrappers: each wrapper sees it as
// `collective`, as it sees c10d's, and `run` launches it on the innermost backend unless a
// wrapper stands in for it.
c10::intrusive_ptr<c10d::Work> launch_through_wrappers(
    c10d::Backend& backend, const LaunchedCollective& collective,
    const std::function<c10::intrusive_ptr<c10d::Work>()>& run);

class DecoratingBackend : public c10d::Backend {
 public:
  explicit DecoratingBackend(c10::intrusive_ptr<c10d::Backend> inner);

  const std::string getBackendName() const override { return inner_->getBackendName(); }
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& options) override;
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& options) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& options) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& options) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& options) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& options) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& options) override;
  void abort() override { inner_->abort(); }
  void shutdown() override { inner_->shutdown(); }

 protected:
  friend c10::intrusive_ptr<c10d::Work> launch_through_wrappers(
      c10d::Backend&, const LaunchedCollective&,
      const std::function<c10::intrusive_ptr<c10d::Work>()>&);
  // Called before each collective goes to the wrapped backend. A Work returned stands for the
  // collective, which then never reaches it; null lets it through.
  virtual c10::intrusive_ptr<c10d::Work> intercept(const LaunchedCollective& collective) = 0;
  c10d::Backend& inner() { return *inner_; }

 private:
  c10::intrusive_ptr<c10d::Backend> inner_;
};

}  // namespace ddpd::detail
