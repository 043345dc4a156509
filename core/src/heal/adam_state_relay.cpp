#include "heal/adam_state_relay.h"

namespace ddpd::detail {
namespace {

using AdamState = torch::optim::AdamWParamState;

// The optimizer's one parameter group steps `params`.
void set_parameters(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& params) {
  TORCH_CHECK(optimizer.param_groups().size() == 1,
              "fsdp relayout: the optimizer has more than one parameter group");
  optimizer.param_groups()[0].params() = params;
}

}  // namespace

AdamStateRelay::AdamStateRelay(torch::optim::Optimizer& own, torch::optim::Optimizer& replica)
    : own_(own), replica_(replica) {}

int64_t AdamStateRelay::read(const torch::Tensor& piece, bool own,
                             const std::vector<torch::Tensor>& out) {
  auto& state = optimizer(own).state();
  const auto it = state.find(piece.unsafeGetTensorImpl());
  if (it == state.end()) return -1;
  const auto& adam = static_cast<const AdamState&>(*it->second);
  out.at(0).copy_(adam.exp_avg().reshape(-1));
  out.at(1).copy_(adam.exp_avg_sq().reshape(-1));
  return adam.step();
}

void AdamStateRelay::drop(const torch::Tensor& piece, bool own) {
  optimizer(own).state().erase(piece.unsafeGetTensorImpl());
}

void AdamStateRelay::write(const torch::Tensor& piece, bool own, std::vector<torch::Tensor> values,
                           int64_t step) {
  if (step < 0) return;
  auto adam = std::make_unique<AdamState>();
  adam->step(step);
  adam->exp_avg(values.at(0).view(piece.sizes()));
  adam->exp_avg_sq(values.at(1).view(piece.sizes()));
  (own ? next_own_ : next_replica_)[piece.unsafeGetTensorImpl()] = std::move(adam);
}

void AdamStateRelay::adopt(const std::vector<torch::Tensor>& own,
                           const std::vector<torch::Tensor>& replica) {
  set_parameters(own_, own);
  set_parameters(replica_, replica);
  own_.state() = std::move(next_own_);
  replica_.state() = std::move(next_replica_);
}

}  // namespace ddpd::detail
