#include "strategies/flat_buffer.h"

namespace ddpd::detail {

torch::Tensor flatten(const std::vector<torch::Tensor>& tensors) {
  TORCH_CHECK(!tensors.empty(), "flatten: no tensors");
  std::vector<torch::Tensor> views;
  views.reserve(tensors.size());
  for (const auto& t : tensors) views.push_back(t.detach().reshape({-1}));
  return torch::cat(views);
}

torch::Tensor empty_flat_like(const std::vector<torch::Tensor>& tensors) {
  TORCH_CHECK(!tensors.empty(), "empty_flat_like: no tensors");
  int64_t numel = 0;
  for (const auto& t : tensors) numel += t.numel();
  return torch::empty({numel}, tensors.front().options().requires_grad(false));
}

void unflatten_into(const torch::Tensor& flat, const std::vector<torch::Tensor>& tensors) {
  torch::NoGradGuard no_grad;
  int64_t offset = 0;
  for (const auto& t : tensors) {
    t.detach().copy_(flat.narrow(0, offset, t.numel()).view_as(t));
    offset += t.numel();
  }
  TORCH_CHECK(offset == flat.numel(), "unflatten_into: ", flat.numel(), " elements for ", offset);
}

}  // namespace ddpd::detail
