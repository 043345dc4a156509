#include "strategies/flat_buffer.h"

#include <algorithm>

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

void broadcast_in_chunks(Communicator& comm, const std::vector<torch::Tensor>& tensors, int root,
                         const std::string& name, int64_t chunk_bytes) {
  if (tensors.empty()) return;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> flat;  // a 1-D view of each
  int64_t total = 0;
  for (const auto& t : tensors) {
    TORCH_CHECK(t.is_contiguous(), "broadcast_in_chunks: a tensor is not contiguous");
    flat.push_back(t.detach().view({-1}));
    total += t.numel();
  }
  const int64_t capacity =
      std::min(total, std::max<int64_t>(1, chunk_bytes / tensors.front().element_size()));
  torch::Tensor buffer = torch::empty({capacity}, flat.front().options());
  const bool source = comm.info().rank == root;
  size_t tensor = 0;
  int64_t offset = 0;  // within flat[tensor]
  while (tensor < flat.size()) {
    // The next piece: slices of consecutive tensors, each copied to (or from) its place in it.
    std::vector<std::pair<torch::Tensor, int64_t>> slices;
    int64_t filled = 0;
    while (tensor < flat.size() && filled < capacity) {
      const int64_t take = std::min(capacity - filled, flat[tensor].numel() - offset);
      slices.emplace_back(flat[tensor].narrow(0, offset, take), filled);
      filled += take;
      offset += take;
      if (offset == flat[tensor].numel()) ++tensor, offset = 0;
    }
    torch::Tensor piece = buffer.narrow(0, 0, filled);
    if (source) {
      for (const auto& [slice, at] : slices) piece.narrow(0, at, slice.numel()).copy_(slice);
    }
    comm.broadcast(piece, root, name).wait();
    if (!source) {
      for (const auto& [slice, at] : slices) slice.copy_(piece.narrow(0, at, slice.numel()));
    }
  }
}

}  // namespace ddpd::detail
