// What Gloo in LibTorch 2.11 lacks or does with a copy, done with what it has: one file per
// algorithm, as gloo itself does (list_all_gather.cpp here; the reduce-scatter, which sums into
// the output over send/recv, is comm/pairwise_reduce_scatter.h). NCCL and
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

}  // namespace ddpd::detail
