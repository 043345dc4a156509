// fsdp shrinking in place (docs/healing.md): one unit's shards laid out again for a smaller
// group. Every survivor holds its own shard of the unit and its copy of its predecessor's, so
// each old shard, its parameter elements and their optimizer state, is on some survivor: its
// provider. Unit by unit, every rank assembles the unit's whole flat layout from its own shards
// and the providers' broadcasts (a buffer of one unit's elements times 1 + the relay's channels,
// reused), then cuts its new shard and its new predecessor's out of it, as a resume at the smaller
// world size reads them from a checkpoint by their ranges. The old shards stay until every unit
// is laid out (the optimizers hold them), so the peak adds the new shards and that buffer.
//
// Part of healing (heal/healer.h), reached through its seam: heal/state_transfer.cpp calls
// GradientSynchronizer::relayout, and fsdp's relayout calls these. It stays beside fsdp rather
// than in heal/ because it cuts fsdp_shard.h's pieces and layouts (ShardPieces, ShardLayout,
// OldShardHolders), which are fsdp's own.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ddpd/core/communicator.h"
#include "ddpd/core/grad_sync.h"
#include "strategies/fsdp_shard.h"

namespace ddpd::detail {

// A unit's old shards as one rank holds them: its own (old rank `rank`) and its copy of rank
// rank - 1's.
struct HeldShards {
  const ShardPieces& own;
  const ShardPieces& replica;
  int rank = 0;
  int world = 0;
  ShardLayout layout;  // the old group's
};

// The unit's whole flat layout as far as this rank cuts from it: row 0 its parameter elements,
// row 1 + c the relay's channel c (defined at the pieces' elements), zero past the old layout's
// padding; elsewhere (a shard this rank neither holds nor needs) undefined. And each parameter's
// optimizer step (-1: no state).
struct WholeUnit {
  torch::Tensor rows;  // [1 + channels, max(old, new padded numel)]
  std::vector<int64_t> steps;
  int64_t bytes = 0;  // received over `next`
};

// Every old shard k: read by each of its holders from its own shard or its copy (and their state
// through `relay`), and broadcast over `next` from shards[k].provider as
// "broadcast/relayout_<name>_<k>" unless every rank whose new shards (its own and its copy of its
// predecessor's, for `padded_numel`) overlap it holds it. From 3 ranks to 2 the shard of the
// survivor ranks 2 and 0 both hold stays where it is: a third of the bytes. Every rank of `next`
// calls it, in the same unit order.
// WholeUnit::rows is a view of `scratch` (1-D, at least whole_unit_numel elements), reused unit
// after unit: with a buffer new for each unit, mapped and faulted in afresh every time, the small
// model's relayout (3 ranks to 2 over shm, 514 MB received a rank, 14 units) took 2.03-2.11 s
// against 1.27-1.34 s (two runs each, 2026-12-05).
WholeUnit assemble_whole_unit(const HeldShards& held, const std::vector<OldShardHolders>& shards,
                              Communicator& next, int64_t padded_numel, ShardStateRelay& relay,
                              const std::string& name, const torch::Tensor& scratch);

// The elements of WholeUnit::rows for a unit laid out as `old_layout`, then as `layout`.
int64_t whole_unit_numel(const ShardLayout& old_layout, const ShardLayout& layout,
                         const ShardStateRelay& relay);

// Rank `owner`'s shard of `whole` in `layout`, with its pieces' state written through `relay`
// (`own`: this rank's own shard, else its copy of its predecessor's).
ShardPieces cut_shard(const WholeUnit& whole, const ShardLayout& layout,
                      const std::vector<int64_t>& offsets, const std::vector<int64_t>& numels,
                      int owner, bool own, ShardStateRelay& relay);

}  // namespace ddpd::detail
