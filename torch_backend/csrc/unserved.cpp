// What the "ddpd" backend does not serve: each fails at launch naming itself, its op, dtype and
// device (c10d's defaults name only the collective), and what to do.

#include "ddpd_backend.h"
#include "shm/served.h"
#include "staging.h"

namespace ddpd_torch {
namespace {

using ddpd::detail::op_name;
using ddpd::shm::kNoOp;
using ddpd::shm::not_served;

constexpr char kServed[] =
    "ddpd serves all_reduce, reduce, broadcast, all_gather, all_gather_into_tensor, "
    "reduce_scatter_tensor, reduce_scatter, their coalesced forms, gather, scatter, "
    "all_to_all_single, send, recv and barrier";

}  // namespace

c10::intrusive_ptr<c10d::Work> DdpdBackend::allreduce_sparse(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& options) {
  not_served("all_reduce", op_name(options.reduceOp), first(tensors),
             "ddpd serves dense (strided) tensors only, not sparse ones");
}

c10::intrusive_ptr<c10d::Work> DdpdBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  not_served("all_gather_coalesced", kNoOp, first(inputs), kServed);
}

c10::intrusive_ptr<c10d::Work> DdpdBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllToAllOptions&) {
  not_served("all_to_all", kNoOp, first(inputs),
             std::string(kServed) + "; all_to_all_single moves one flat tensor");
}

}  // namespace ddpd_torch
