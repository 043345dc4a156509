// Which rank owns each parameter's optimizer state under ZeRO-1: shared by ShardedOptimizer
// (core/src/train/sharded_optimizer.cpp) and the replay that predicts its traffic
// (step_replay.h), so that a prediction balances exactly as a run does. Plain arithmetic.
#pragma once

#include <cstdint>
#include <vector>

namespace ddpd {

// The owner of each of `bytes` (one entry per parameter), by greedy balance: largest first (a
// stable order: ties keep their index order), each to the rank owning the fewest bytes so far
// (lowest rank on ties). Deterministic, so every rank computes the same owners. `owned_bytes`,
// one entry per rank, carries the balance in and out, across parameter groups.
std::vector<int> assign_shard_owners(const std::vector<int64_t>& bytes,
                                     std::vector<int64_t>& owned_bytes);

}  // namespace ddpd
