// The plain optimizer's step through the fused AdamW kernel (kernels/fused_adamw.h), keeping
// torch::optim::AdamW as the holder of options and state (so checkpoints, ZeRO-1's accounting
// and the memory figures read it as before).
#pragma once

#include <torch/torch.h>

#include <vector>

namespace ddpd::detail {

// One AdamW step of the parameters in `only` (every parameter of the optimizer when empty) that
// have a gradient, with each parameter group's options; creates missing state as torch does.
// CPU parameters step through kernels::adamw_update, the others (CUDA) through torch's fused
// multi-tensor AdamW, one call per parameter group.
void fused_adamw_step(torch::optim::AdamW& optimizer, const std::vector<torch::Tensor>& only = {});

}  // namespace ddpd::detail
