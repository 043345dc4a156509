// Byte accounting for the three measurement points (after init, before and after the last step).
#pragma once

#include <torch/torch.h>

#include <vector>

#include "ddpd/core/trainer.h"

namespace ddpd::detail {

// Sums the bytes of distinct tensors (views of one buffer count once per view).
MemoryBytes measure_memory(const std::vector<torch::Tensor>& parameters,
                           int64_t optimizer_state_bytes);

// Peak resident set size of this process, bytes.
int64_t peak_rss_bytes();

}  // namespace ddpd::detail
