#include "train/adamw_step.h"

#include <unordered_set>

#include "ddpd/kernels/fused_adamw.h"

namespace ddpd::detail {

void fused_adamw_step(torch::optim::AdamW& optimizer, const std::vector<torch::Tensor>& only) {
  std::unordered_set<const c10::TensorImpl*> chosen;
  for (const auto& p : only) chosen.insert(p.unsafeGetTensorImpl());
  auto& state = optimizer.state();
  for (auto& group : optimizer.param_groups()) {
    const auto& options = static_cast<const torch::optim::AdamWOptions&>(group.options());
    TORCH_CHECK(!options.amsgrad(), "fused AdamW: amsgrad is not supported");
    const kernels::AdamWHyperparameters h{options.lr(), std::get<0>(options.betas()),
                                          std::get<1>(options.betas()), options.eps(),
                                          options.weight_decay()};
    // Parameters off the CPU (CUDA) go to torch's multi-tensor kernel together, after the loop.
    std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs;
    std::vector<int64_t> steps;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (!chosen.empty() && !chosen.count(p.unsafeGetTensorImpl())) continue;
      void* const key = p.unsafeGetTensorImpl();  // torch::optim keys its state by TensorImpl
      auto it = state.find(key);
      if (it == state.end()) {
        auto fresh = std::make_unique<torch::optim::AdamWParamState>();
        fresh->step(0);
        fresh->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        it = state.emplace(key, std::move(fresh)).first;
      }
      auto& s = static_cast<torch::optim::AdamWParamState&>(*it->second);
      s.step(s.step() + 1);
      torch::Tensor param = p.detach();  // the same storage, outside autograd
      if (param.is_cpu()) {
        kernels::adamw_update(param, p.grad(), s.exp_avg(), s.exp_avg_sq(), s.step(), h);
        continue;
      }
      params.push_back(param);
      grads.push_back(p.grad());
      exp_avgs.push_back(s.exp_avg());
      exp_avg_sqs.push_back(s.exp_avg_sq());
      steps.push_back(s.step());
    }
    kernels::adamw_update_multi_tensor(params, grads, exp_avgs, exp_avg_sqs, steps, h);
  }
}

}  // namespace ddpd::detail
