#include "strategies/fsdp_shard.h"

#include <algorithm>

namespace ddpd::detail {

void ShardPieces::set_gradients(const torch::Tensor& gradient) {
  for (size_t k = 0; k < pieces.size(); ++k) {
    pieces[k].mutable_grad() = gradient.narrow(0, at[k], ranges[k].end - ranges[k].begin);
  }
}

void ShardPieces::reset_gradients() {
  for (auto& piece : pieces) piece.mutable_grad().reset();
}

ShardPieces make_shard_pieces(torch::Tensor values, const std::vector<int64_t>& offsets,
                              const std::vector<int64_t>& numels, int64_t shard_begin) {
  ShardPieces shard;
  const int64_t shard_numel = values.numel();
  const int64_t shard_end = shard_begin + shard_numel;
  for (size_t k = 0; k < offsets.size(); ++k) {
    const int64_t begin = std::clamp(shard_begin - offsets[k], int64_t{0}, numels[k]);
    const int64_t end = std::max(begin, std::clamp(shard_end - offsets[k], int64_t{0}, numels[k]));
    const int64_t at = std::clamp(offsets[k] + begin - shard_begin, int64_t{0}, shard_numel);
    shard.ranges.push_back({begin, end});
    shard.at.push_back(at);
    shard.pieces.push_back(values.narrow(0, at, end - begin).detach().set_requires_grad(true));
  }
  shard.values = std::move(values);
  return shard;
}

}  // namespace ddpd::detail
