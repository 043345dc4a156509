// What a backend whose ranks share memory offers beyond c10d's Backend, on the lines of PyTorch's
// symmetric memory: buffers every rank maps, which its all-reduces read in place, and what the
// shared segment knows of the peers. The shared-memory backend (shm/shm_process_group.h)
// implements it. Communicator asks a backend for it once, when it is made, and otherwise knows
// nothing of shm; a backend without it (Gloo, NCCL) gets ordinary memory.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <optional>
#include <vector>

#include "ddpd/common/shared_buffer_fallback.h"

namespace ddpd::detail {

// Thread contract: as each member says; a backend implementing it states the rest.
class SharedMemoryCapability {
 public:
  virtual ~SharedMemoryCapability() = default;
  // Collective (every rank, same sizes, same order): a zeroed 1-D tensor of `numel` elements in
  // memory every rank maps, or ordinary memory on every rank when any rank could not map it.
  virtual at::Tensor allocate_shared(int64_t numel, const at::TensorOptions& options) = 0;
  // Why the latest allocate_shared fell back (none when it did not).
  virtual const std::optional<SharedBufferFallback>& last_shared_fallback() const = 0;
  // Whether `tensor` lies wholly in a buffer from allocate_shared. Any thread.
  virtual bool is_shared(const at::Tensor& tensor) const = 0;
  // Launches a reduce-scatter (sum) as c10d's _reduce_scatter_base, that also leaves in
  // `predecessor_output` (the output's shape) the sum rank (rank - 1) mod N gets in its output,
  // bit for bit, within the same collective (fsdp's --shard-replicas). The tensors must stay
  // alive until the work completes.
  virtual c10::intrusive_ptr<c10d::Work> reduce_scatter_keeping_predecessor(
      at::Tensor& output, at::Tensor& predecessor_output, const at::Tensor& input) = 0;
  // By rank: whether the segment shows that rank gone (its process, its heartbeat, or it left).
  // Any thread.
  virtual std::vector<bool> gone_ranks() const = 0;
};

}  // namespace ddpd::detail
