#include <stdexcept>

#include "ddpd/kernels/fused_adamw.h"

namespace ddpd::kernels {

void adamw_update_multi_tensor(const std::vector<torch::Tensor>& params,
                               const std::vector<torch::Tensor>& grads,
                               const std::vector<torch::Tensor>& exp_avgs,
                               const std::vector<torch::Tensor>& exp_avg_sqs,
                               const std::vector<int64_t>& steps, const AdamWHyperparameters& h) {
  const size_t n = params.size();
  if (grads.size() != n || exp_avgs.size() != n || exp_avg_sqs.size() != n || steps.size() != n) {
    throw std::invalid_argument("adamw_update_multi_tensor: lists of different lengths");
  }
  if (n == 0) return;
  // The kernel reads each parameter's step from a float32 scalar on its device: one host-to-
  // device copy for the whole list, then views.
  std::vector<float> step_values(steps.begin(), steps.end());
  const torch::Tensor on_device = torch::tensor(step_values, torch::kFloat32)
                                      .to(params.front().device(), /*non_blocking=*/true);
  const std::vector<torch::Tensor> state_steps = on_device.unbind(0);
  torch::NoGradGuard no_grad;
  at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, state_steps, h.lr,
                    h.beta1, h.beta2, h.weight_decay, h.eps, /*amsgrad=*/false,
                    /*maximize=*/false);
}

}  // namespace ddpd::kernels
