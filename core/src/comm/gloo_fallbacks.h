// What Gloo in LibTorch 2.11 lacks or does with a copy, done with what it has: one file per
// algorithm, as gloo itself does (list_all_gather.cpp, alltoall_reduce_scatter.cpp). NCCL and
// the shared-memory transport have the flat forms, so these run only on the Gloo TCP transport.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <chrono>
#include <cstdint>

namespace ddpd::detail {

// All-gather into `output` (contiguous, world_size × input.numel()) through the list form, whose
// outputs are views into `output`, so the gathered chunks land in place: 2.11's Gloo
// _allgather_base stages a copy of the whole output.
c10::intrusive_ptr<c10d::Work> list_all_gather(c10d::Backend& group, at::Tensor& output,
                                               const at::Tensor& flat_input, int world_size,
                                               std::chrono::milliseconds timeout);

// A reduce-scatter as an all-to-all of the chunks: row r of `received` ([world_size, chunk]) is
// rank r's copy of this rank's chunk, summed in rank order at wait() (deterministic). 2.11's Gloo
// _reduce_scatter_base is a clone plus a whole all-reduce: N times the bytes on the wire.
struct AllToAllReduceScatter {
  c10::intrusive_ptr<c10d::Work> work;
  at::Tensor received;
};
AllToAllReduceScatter alltoall_reduce_scatter(c10d::Backend& group, const at::Tensor& flat_input,
                                              int world_size, int64_t chunk,
                                              std::chrono::milliseconds timeout);

}  // namespace ddpd::detail
