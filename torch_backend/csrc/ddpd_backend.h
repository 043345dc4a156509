#pragma once
// The "ddpd" torch.distributed backend: ddpd's shared-memory process group
// (core/src/shm/shm_process_group.h) for the collectives, and a Gloo group of the same ranks
// alongside (the companion) for point-to-point transfers, all_to_all_single, gather and scatter,
// which need to be correct rather than fast. The shm group checks at launch that it serves each
// collective's op, dtype and device (core/src/shm/served.h); this class adds the forms PyTorch
// calls that the shm group lacks (lists, coalesced lists, non-contiguous outputs) and fails what
// neither serves at launch, on every rank, naming the collective, the op, the dtype and the
// device.
//
// Thread contract: as the shm group's. Collectives may be launched from any thread, one at a
// time; they run in launch order on the shm group's executor thread, which also completes the
// works. Point-to-point works complete on the P2pWaiter's thread (p2p_waiter.h); all_to_all's,
// gather's and scatter's on Gloo's. The destructor stops those threads; it must not run holding the
// GIL while a Python future callback waits for it (torch's Python holder for Backend drops the GIL
// in its destructor).

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <chrono>
#include <functional>
#include <memory>

#include "p2p_waiter.h"
#include "shm/shm_process_group.h"

namespace ddpd_torch {

class DdpdBackend final : public c10d::Backend {
 public:
  // Runs its argument without the GIL when the calling thread holds it (module.cpp's: this
  // class knows nothing of Python).
  using WithoutGil = std::function<void(const std::function<void()>&)>;
  // `companion`: a Gloo group of the same ranks, created with the same store and timeout.
  DdpdBackend(c10::intrusive_ptr<ddpd::shm::ShmProcessGroup> shm,
              c10::intrusive_ptr<c10d::Backend> companion, std::chrono::milliseconds timeout,
              WithoutGil without_gil);

  const std::string getBackendName() const override { return "ddpd"; }
  c10::intrusive_ptr<Options> getBackendOptions() override;
  // destroy_process_group's: stops the shm group's threads now, so that none outlives Python. A
  // Python future callback (DDP's comm hooks, `then`) runs on the executor and is dropped there
  // after its future completes; a waiter can go on, and the script end, in between. Dropping it
  // once the interpreter is finalizing killed the thread mid-unwind, and the process aborted
  // ("terminate called without an active exception", DDP with allreduce_hook, 1 run in 3).
  // Collectives launched afterwards fail. Not concurrent with launches (c10d's contract).
  void shutdown() override;

  // Served.
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
  // The list form, through one flat copy of the inputs.
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& options) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& options) override;
  // On the Gloo companion, as bytes (any dtype), staged when not contiguous (p2p.cpp).
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& options) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

  // Coalesced (coalesced.cpp): one shm collective on one flat buffer for the whole list.
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& options) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& options) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& options) override;
  // Rooted (rooted.cpp): reduce on the shm group, gather and scatter on the Gloo companion. A
  // root's list that does not fit fails at launch on the root only (the others cannot see it),
  // and they at the group's timeout, as with Gloo.
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& options) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& options) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& options) override;

  // Not served (unserved.cpp): each names itself, its op, dtype and device (c10d's defaults name
  // only the collective).
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& options) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& options) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& options) override;

 private:
  // The shm group, or the Gloo companion, or an error naming the shutdown.
  ddpd::shm::ShmProcessGroup& shm();
  c10d::Backend& companion();
  // A point-to-point transfer `gloo` (of `staged`), completed by the waiter after copying
  // `staged` into `targets` where they differ.
  c10::intrusive_ptr<c10d::Work> p2p_work(c10::intrusive_ptr<c10d::Work> gloo,
                                          std::vector<at::Tensor> targets,
                                          std::vector<at::Tensor> staged, std::string what,
                                          c10d::OpType type);

  c10::intrusive_ptr<ddpd::shm::ShmProcessGroup> shm_;  // null after shutdown()
  c10::intrusive_ptr<c10d::Backend> companion_;         // null after shutdown()
  std::unique_ptr<P2pWaiter> p2p_ = std::make_unique<P2pWaiter>();
  const std::chrono::milliseconds timeout_;
  const WithoutGil without_gil_;
};

}  // namespace ddpd_torch
