// One rank's shard of an fsdp unit as the optimizer sees it (docs/fsdp.md): a flat tensor of the
// unit's elements [begin, begin + shard_numel), and each parameter's part of it as a leaf. A rank
// holds its own shard, and under --shard-replicas its ring predecessor's too (docs/healing.md).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "ddpd/core/grad_sync.h"

namespace ddpd::detail {

struct ShardPieces {
  torch::Tensor values;               // [shard_numel]; the padding past the last parameter is 0
  std::vector<torch::Tensor> pieces;  // each parameter's elements within `values` (leaves)
  std::vector<HeldRange> ranges;      // of each parameter (flattened), possibly empty
  std::vector<int64_t> at;            // where each piece starts in `values`

  // Each piece's gradient: its part of `gradient` ([shard_numel]).
  void set_gradients(const torch::Tensor& gradient);
  void reset_gradients();
};

// The pieces of `values` (the shard starting at element `shard_begin` of the unit's flat layout)
// for parameters at `offsets` with `numels` in that layout. The pieces share `values`' memory.
ShardPieces make_shard_pieces(torch::Tensor values, const std::vector<int64_t>& offsets,
                              const std::vector<int64_t>& numels, int64_t shard_begin);

}  // namespace ddpd::detail
