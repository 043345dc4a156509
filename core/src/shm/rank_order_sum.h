#pragma once
// The reduction at the heart of the shm all-reduce and reduce-scatter: the sum of one sub-range
// over every rank's input, in rank order, written to one or two destinations in one pass.
//
// Why a loop of its own: summing n terms with at::Tensor ops (copy_, then n-1 add_) passes over
// the accumulator n+1 times, and the all-reduce then copies it out once more. At world 4 that is
// 6.5 bytes of memory traffic per byte of sub-range, against 3 for one fused pass (4 reads, 2
// writes); the reduce phase is half of the transport's memory traffic, and the transport is
// bound by memory bandwidth when ranks outnumber cores.
//
// Every element is summed term by term in rank order, ((t0 + t1) + t2) + ..., so it is rounded
// exactly as the Tensor-op sequence rounds it: the same bits. Up to 8 terms that is one
// vectorized pass over the elements; past 8, the terms stream through L1 blocks.

#include <cstdint>
#include <vector>

#include <c10/core/ScalarType.h>

namespace ddpd::shm {

// Sums `count` elements of `dtype` over `terms` (rank order) into every destination of `outs`:
// one, two, or the terms themselves (`outs` holding the same pointers in the same order: the
// shared all-reduce writes the result back into every rank's buffer). A destination may be a
// term exactly (the same address), and must not overlap a term at any other offset: the loop is
// vectorized on the promise that no element depends on another. Returns false, writing nothing, for
// a dtype it does not handle (only float32 and float64 are fused; the caller then falls back to
// Tensor ops) or other destinations.
bool sum_in_rank_order(const std::vector<const void*>& terms, int64_t count, c10::ScalarType dtype,
                       const std::vector<void*>& outs);

}  // namespace ddpd::shm
