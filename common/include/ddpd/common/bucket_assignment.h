// How the bucketed strategy packs gradients into buckets: shared by the strategy itself
// (core/src/strategies/bucketed.cpp) and the replay that predicts it (step_replay.h), so that a
// prediction forms exactly the buckets a run would. Plain arithmetic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ddpd {

// The bucketed strategy's first bucket cap, MiB (c10d's: the first all-reduce starts early in
// backward); the smaller of this and the bucket size applies. The strategy, the replay and
// `plan` all read it here.
constexpr double kFirstBucketMiB = 1.0;

// Parameter indices (into `numels`) taken in `order` and packed into buckets of at most
// `cap_bytes`, the first of at most `first_cap_bytes`; a parameter larger than its cap gets a
// bucket of its own. Caps must be positive (std::invalid_argument).
std::vector<std::vector<size_t>> assign_buckets(const std::vector<size_t>& order,
                                                const std::vector<int64_t>& numels,
                                                int64_t element_size, int64_t cap_bytes,
                                                int64_t first_cap_bytes);
// The same in reverse registration order (how gradients roughly become ready in backward), with
// every bucket under `cap_bytes`.
std::vector<std::vector<size_t>> assign_buckets(const std::vector<int64_t>& numels,
                                                int64_t element_size, int64_t cap_bytes);

}  // namespace ddpd
