// Flatten → collective → unflatten, written once: the flat strategy, the module-state broadcast
// and ZeRO-1's owner broadcasts all move many tensors through one collective on one buffer.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "ddpd/core/communicator.h"
#include "ddpd/core/grad_sync.h"

namespace ddpd::detail {

// The tensors' elements back to back in one new 1-D buffer (they share one dtype and device).
torch::Tensor flatten(const std::vector<torch::Tensor>& tensors);

// An uninitialised 1-D buffer of the size flatten() would give, for a rank that only receives:
// copying its own stale values in first would be wasted work.
torch::Tensor empty_flat_like(const std::vector<torch::Tensor>& tensors);

// Copies consecutive slices of `flat` back into `tensors` (the inverse of flatten).
void unflatten_into(const torch::Tensor& flat, const std::vector<torch::Tensor>& tensors);

// Broadcasts the contiguous `tensors` (one dtype and device) from `root` a piece at a time: small
// tensors are packed into pieces of at most `chunk_bytes` in one reused buffer, broadcast as
// `name`, and copied out on the other ranks; a tensor of 1 MiB or more (or a quarter of a piece)
// is broadcast as itself, in pieces of at most `chunk_bytes`, with no copy. The same bytes as one
// flat broadcast, without a flat copy of all of them on every rank, every page of it faulted in
// fresh (kBroadcastChunkBytes has the figures).
void broadcast_in_chunks(Communicator& comm, const std::vector<torch::Tensor>& tensors, int root,
                         const std::string& name, int64_t chunk_bytes = kBroadcastChunkBytes);

}  // namespace ddpd::detail
