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

namespace {

// A tensor of at least this many bytes (or a quarter of a piece, where pieces are smaller) is
// broadcast as itself, a piece at a time: no copy into the buffer and out of it.
constexpr int64_t kInPlaceBytes = int64_t{1} << 20;

}  // namespace

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
  const int64_t in_place_bytes = std::min(kInPlaceBytes, chunk_bytes / 4);
  auto in_place = [&](size_t i) {
    return static_cast<int64_t>(flat[i].nbytes()) >= in_place_bytes;
  };
  torch::Tensor buffer;  // for the small tensors, made at the first
  const bool source = comm.info().rank == root;
  size_t tensor = 0;
  while (tensor < flat.size()) {
    if (in_place(tensor)) {
      const int64_t numel = flat[tensor].numel();
      for (int64_t at = 0; at < numel; at += capacity) {
        torch::Tensor piece = flat[tensor].narrow(0, at, std::min(capacity, numel - at));
        comm.broadcast(piece, root, name).wait();
      }
      ++tensor;
      continue;
    }
    // The next piece: consecutive small tensors, each copied to (or from) its place in it.
    if (!buffer.defined()) buffer = torch::empty({capacity}, flat.front().options());
    std::vector<std::pair<torch::Tensor, int64_t>> slices;
    int64_t filled = 0;
    while (tensor < flat.size() && !in_place(tensor) && filled + flat[tensor].numel() <= capacity) {
      slices.emplace_back(flat[tensor], filled);
      filled += flat[tensor].numel();
      ++tensor;
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
