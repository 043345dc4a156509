// Flatten → collective → unflatten, written once: the flat strategy, the module-state broadcast
// and ZeRO-1's owner broadcasts all move many tensors through one collective on one buffer.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace ddpd::detail {

// The tensors' elements back to back in one new 1-D buffer (they share one dtype and device).
torch::Tensor flatten(const std::vector<torch::Tensor>& tensors);

// An uninitialised 1-D buffer of the size flatten() would give, for a rank that only receives:
// copying its own stale values in first would be wasted work.
torch::Tensor empty_flat_like(const std::vector<torch::Tensor>& tensors);

// Copies consecutive slices of `flat` back into `tensors` (the inverse of flatten).
void unflatten_into(const torch::Tensor& flat, const std::vector<torch::Tensor>& tensors);

}  // namespace ddpd::detail
