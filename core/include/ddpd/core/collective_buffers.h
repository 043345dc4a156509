// Buffers that a communicator's all-reduce reads in place. Over shm they lie in memory every rank
// maps (the backend's shared-memory capability, core/src/comm/shared_memory_capability.h, as
// PyTorch's symmetric memory); elsewhere, or where /dev/shm cannot hold them, they are ordinary
// memory. Thread contract: the thread that launches the communicator's collectives.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>

#include "ddpd/common/shared_buffer_fallback.h"
#include "ddpd/core/communicator.h"

namespace ddpd {

// A zeroed 1-D buffer that all_reduce_sum reads in place, without copying it into the transport
// first. Collective: every rank allocates the same sizes in the same order.
at::Tensor allocate_collective_buffer(Communicator& comm, int64_t numel,
                                      const at::TensorOptions& options);

// Whether an all-reduce of `tensor` reads the peers' data in place (it lies in a buffer from
// allocate_collective_buffer that every rank maps).
bool reads_in_place(const Communicator& comm, const at::Tensor& tensor);

// Why the latest allocate_collective_buffer over shm fell back to private memory on every rank:
// the rank, the step and the errno (none when none fell back, and off shm).
std::optional<SharedBufferFallback> shared_buffer_fallback(const Communicator& comm);

}  // namespace ddpd
