#include "strategies/fsdp_relayout.h"

#include <algorithm>

#include "strategies/flat_buffer.h"

namespace ddpd::detail {
namespace {

// Whether new rank `rank`'s shards (its own and its copy of its predecessor's) in a layout of
// `shard_numel` elements a rank over `world` ranks overlap the old elements [begin, end).
bool needs(int rank, int world, int64_t shard_numel, int64_t begin, int64_t end) {
  const int predecessor = (rank + world - 1) % world;
  for (const int owner : {rank, predecessor}) {
    if (owner * shard_numel < end && begin < (owner + 1) * shard_numel) return true;
  }
  return false;
}

// Old shard k's elements and state into its place in `whole` on each of its holders, then from
// its provider to every rank where some rank that needs it does not hold it. Each piece's step
// comes with them (the same on every shard of a parameter that has state: fsdp steps every piece
// every step).
void receive_old_shard(const HeldShards& held, int k, const OldShardHolders& holders,
                       int64_t new_shard_numel, Communicator& next, ShardStateRelay& relay,
                       const std::string& name, WholeUnit& whole) {
  const int64_t size = held.layout.shard_numel;
  std::vector<torch::Tensor> rows;
  for (int64_t c = 0; c < whole.rows.size(0); ++c) {
    rows.push_back(whole.rows[c].narrow(0, k * size, size));
  }
  std::vector<int64_t> steps(held.own.pieces.size(), -1);
  const int rank = next.info().rank;
  const int world = next.info().world_size;
  if (holders.holds.at(rank)) {
    const bool own = held.rank == k;
    TORCH_CHECK(own || (k + 1) % held.world == held.rank, "fsdp relayout: rank ", held.rank,
                " holds neither shard ", k, " nor its copy");
    const ShardPieces& shard = own ? held.own : held.replica;
    rows[0].copy_(shard.values);
    for (size_t j = 0; j < shard.pieces.size(); ++j) {
      const int64_t numel = shard.ranges[j].end - shard.ranges[j].begin;
      std::vector<torch::Tensor> out;
      for (size_t c = 1; c < rows.size(); ++c) out.push_back(rows[c].narrow(0, shard.at[j], numel));
      steps[j] = relay.read(shard.pieces[j], own, out);
    }
  }
  bool moves = false;
  for (int r = 0; r < world; ++r) {
    moves = moves ||
            (!holders.holds.at(r) && needs(r, world, new_shard_numel, k * size, (k + 1) * size));
  }
  const std::string collective = "broadcast/relayout_" + name + "_" + std::to_string(k);
  if (moves) {
    broadcast_in_chunks(next, rows, holders.provider, collective);
    if (!holders.holds.at(rank)) {
      for (const auto& row : rows) whole.bytes += row.nbytes();
    }
  }
  // The steps go to every rank, even where nothing else moves: a piece of no elements keeps its
  // parameter's step too, as a resume gives it, and a checkpoint writes it.
  if (world > 1) {
    torch::Tensor agreed = torch::tensor(steps, torch::kLong).to(whole.rows.device());
    next.broadcast(agreed, holders.provider, collective + "_steps").wait();
    agreed = agreed.cpu();
    for (size_t j = 0; j < steps.size(); ++j) {
      steps[j] = agreed[static_cast<int64_t>(j)].item<int64_t>();
    }
  }
  for (size_t j = 0; j < steps.size(); ++j) whole.steps[j] = std::max(whole.steps[j], steps[j]);
}

}  // namespace

int64_t whole_unit_numel(const ShardLayout& old_layout, const ShardLayout& layout,
                         const ShardStateRelay& relay) {
  return (1 + relay.channels()) * std::max(old_layout.padded_numel, layout.padded_numel);
}

WholeUnit assemble_whole_unit(const HeldShards& held, const std::vector<OldShardHolders>& shards,
                              Communicator& next, int64_t padded_numel, ShardStateRelay& relay,
                              const std::string& name, const torch::Tensor& scratch) {
  WholeUnit whole;
  const int64_t length = std::max(held.layout.padded_numel, padded_numel);
  // Every element a rank cuts is written below, by a copy or a broadcast, but the padding past
  // the old layout's: only that is zeroed.
  whole.rows = scratch.narrow(0, 0, (1 + relay.channels()) * length).view({-1, length});
  whole.rows.narrow(1, held.layout.padded_numel, length - held.layout.padded_numel).zero_();
  whole.steps.assign(held.own.pieces.size(), -1);
  const int64_t new_shard_numel = padded_numel / next.info().world_size;
  for (int k = 0; k < static_cast<int>(shards.size()); ++k) {
    receive_old_shard(held, k, shards[k], new_shard_numel, next, relay, name, whole);
  }
  return whole;
}

ShardPieces cut_shard(const WholeUnit& whole, const ShardLayout& layout,
                      const std::vector<int64_t>& offsets, const std::vector<int64_t>& numels,
                      int owner, bool own, ShardStateRelay& relay) {
  const int64_t begin = owner * layout.shard_numel;
  ShardPieces shard = make_shard_pieces(whole.rows[0].narrow(0, begin, layout.shard_numel).clone(),
                                        offsets, numels, begin);
  for (size_t j = 0; j < shard.pieces.size(); ++j) {
    const int64_t numel = shard.ranges[j].end - shard.ranges[j].begin;
    std::vector<torch::Tensor> values;
    for (int64_t c = 1; c < whole.rows.size(0); ++c) {
      values.push_back(whole.rows[c].narrow(0, begin + shard.at[j], numel).clone());
    }
    relay.write(shard.pieces[j], own, std::move(values), whole.steps[j]);
  }
  return shard;
}

}  // namespace ddpd::detail
