#include "ddpd/kernels/fused_adamw.h"

#include <ATen/Parallel.h>

#include <cmath>

namespace ddpd::kernels {
namespace {

// The element loop, compiled for AVX2 and for the x86-64 baseline and picked at run time
// (target_clones): vectorised sqrt and division need no fast-math, only -fno-math-errno.
__attribute__((target_clones("avx2", "default"))) void adamw_elements(
    float* p, const float* g, float* m, float* v, int64_t begin, int64_t end, bool decays,
    float decay, float beta1, float one_minus_beta1, float beta2, float one_minus_beta2,
    float sqrt_bias_correction2, float eps, float minus_step_size) {
  for (int64_t i = begin; i < end; ++i) {
    const float pi = decays ? p[i] * decay : p[i];
    const float gi = g[i];
    const float mi = m[i] * beta1 + one_minus_beta1 * gi;             // mul_, add_(g, 1 - b1)
    const float vi = v[i] * beta2 + one_minus_beta2 * gi * gi;        // mul_, addcmul_
    const float denom = std::sqrt(vi) / sqrt_bias_correction2 + eps;  // sqrt / c, add_(eps)
    m[i] = mi;
    v[i] = vi;
    p[i] = pi + minus_step_size * mi / denom;  // addcdiv_
  }
}

}  // namespace

void adamw_update(torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& exp_avg,
                  torch::Tensor& exp_avg_sq, int64_t step, const AdamWHyperparameters& h) {
  TORCH_CHECK(step >= 1, "adamw_update: step counts from 1");
  const double bias_correction1 = 1 - std::pow(h.beta1, static_cast<double>(step));
  const double bias_correction2 = 1 - std::pow(h.beta2, static_cast<double>(step));
  const double step_size = h.lr / bias_correction1;
  const bool fusable = param.device().is_cpu() && param.scalar_type() == torch::kFloat &&
                       grad.scalar_type() == torch::kFloat && param.is_contiguous() &&
                       grad.is_contiguous() && exp_avg.is_contiguous() &&
                       exp_avg_sq.is_contiguous() && grad.numel() == param.numel() &&
                       exp_avg.numel() == param.numel() && exp_avg_sq.numel() == param.numel();
  torch::NoGradGuard no_grad;
  if (!fusable) {
    if (h.weight_decay != 0) param.mul_(1 - h.lr * h.weight_decay);
    exp_avg.mul_(h.beta1).add_(grad, 1 - h.beta1);
    exp_avg_sq.mul_(h.beta2).addcmul_(grad, grad, 1 - h.beta2);
    const auto denom = (exp_avg_sq.sqrt() / std::sqrt(bias_correction2)).add_(h.eps);
    param.addcdiv_(exp_avg, denom, -step_size);
    return;
  }
  // The scalars as torch's CPU kernels see them: cast to the tensors' dtype.
  const float decay = static_cast<float>(1 - h.lr * h.weight_decay);
  const bool decays = h.weight_decay != 0;
  const float beta1 = static_cast<float>(h.beta1),
              one_minus_beta1 = static_cast<float>(1 - h.beta1);
  const float beta2 = static_cast<float>(h.beta2),
              one_minus_beta2 = static_cast<float>(1 - h.beta2);
  const float sqrt_bias_correction2 = static_cast<float>(std::sqrt(bias_correction2));
  const float eps = static_cast<float>(h.eps);
  const float minus_step_size = static_cast<float>(-step_size);
  float* p = param.data_ptr<float>();
  const float* g = grad.data_ptr<float>();
  float* m = exp_avg.data_ptr<float>();
  float* v = exp_avg_sq.data_ptr<float>();
  at::parallel_for(0, param.numel(), 32768, [&](int64_t begin, int64_t end) {
    adamw_elements(p, g, m, v, begin, end, decays, decay, beta1, one_minus_beta1, beta2,
                   one_minus_beta2, sqrt_bias_correction2, eps, minus_step_size);
  });
}

}  // namespace ddpd::kernels
