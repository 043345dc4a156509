// AdamW's update (torch.optim.AdamW: decoupled weight decay, bias-corrected moments, amsgrad off)
// in one pass over a parameter: weight decay, both moments and the step per element, where
// torch's implementation makes seven full passes over memory. The element-wise arithmetic is
// torch's, in its order, in float32.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

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

// The same step for tensors off the CPU (CUDA): torch's fused AdamW (`_fused_adamw_`, what
// torch.optim.AdamW(fused=True) runs: a few multi-tensor launches for the whole list, no host
// work), where the per-parameter path above would issue five element-wise ops per parameter.
// Lists of one length, every tensor on one device in one floating dtype; `steps[i]` counts
// from 1, already incremented. Also runs on CPU (torch has a CPU kernel), which the test uses.
void adamw_update_multi_tensor(const std::vector<torch::Tensor>& params,
                               const std::vector<torch::Tensor>& grads,
                               const std::vector<torch::Tensor>& exp_avgs,
                               const std::vector<torch::Tensor>& exp_avg_sqs,
                               const std::vector<int64_t>& steps, const AdamWHyperparameters& h);

}  // namespace ddpd::kernels
