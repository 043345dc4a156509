// AdamW's update (torch.optim.AdamW: decoupled weight decay, bias-corrected moments, amsgrad off)
// in one pass over a parameter: weight decay, both moments and the step per element, where
// torch's implementation makes seven full passes over memory. The element-wise arithmetic is
// torch's, in its order, in float32.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace ddpd::kernels {

struct AdamWHyperparameters {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

// One AdamW step of `param` (step `step`, counting from 1, already incremented) in place, with
// its moments `exp_avg` and `exp_avg_sq` (updated in place). Contiguous float32 CPU tensors of one
// size take the fused loop; anything else runs the same math as torch tensor ops.
void adamw_update(torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& exp_avg,
                  torch::Tensor& exp_avg_sq, int64_t step, const AdamWHyperparameters& h);

}  // namespace ddpd::kernels
