// The "ddpd" backend's coalesced collectives, which torch.distributed's _coalescing_manager and
// the functional collectives (DTensor) call with a list of tensors: each is one shm collective on
// one flat buffer, then one copy out, so a list of N costs one collective's synchronisation, not
// N. Every element is reduced or moved as the single-tensor collective would (the rank-order
// reduction is elementwise), so the bits are those of N separate calls.

#include "chained_work.h"
#include "ddpd_backend.h"
#include "shm/served.h"
#include "staging.h"

namespace ddpd_torch {
namespace {

using ddpd::detail::op_name;
using ddpd::shm::check_data_move;
using ddpd::shm::check_reduction;
using ddpd::shm::check_same_dtype;
using ddpd::shm::kNoOp;
using ddpd::shm::not_served;

int64_t total_numel(const std::vector<at::Tensor>& tensors) {
  int64_t n = 0;
  for (const at::Tensor& t : tensors) n += t.numel();
  return n;
}

void check_pairs(const char* name, const std::string& op, const std::vector<at::Tensor>& outputs,
                 const std::vector<at::Tensor>& inputs) {
  if (outputs.size() != inputs.size() || inputs.empty()) {
    not_served(name, op, first(inputs),
               "it takes as many outputs as inputs, at least one; got " +
                   std::to_string(outputs.size()) + " and " + std::to_string(inputs.size()));
  }
}

}  // namespace

c10::intrusive_ptr<c10d::Work> DdpdBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& options) {
  const char* name = "all_reduce_coalesced";
  if (tensors.empty()) not_served(name, op_name(options.reduceOp), {}, "it got no tensor");
  std::vector<at::Tensor> flat_parts;
  for (const at::Tensor& t : tensors) {
    check_reduction(name, t, options.reduceOp);
    check_same_dtype(name, tensors[0], t);
    flat_parts.push_back(t.reshape({-1}));
  }
  std::vector<at::Tensor> flat{at::cat(flat_parts)};
  c10d::AllreduceOptions all_reduce;
  all_reduce.reduceOp = options.reduceOp;
  all_reduce.timeout = options.timeout;
  auto inner = shm().allreduce(flat, all_reduce);
  return then_run(
      inner, tensors,
      [tensors, flat = flat[0]] {
        int64_t offset = 0;
        for (const at::Tensor& t : tensors) {
          t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
          offset += t.numel();
        }
      },
      rank_, c10d::OpType::COALESCED);
}

// Each output i holds the world's inputs i in rank order: [world, numel_i]. The flat all-gather
// gives [world, Σ numel_i], rank r's row being its inputs end to end.
c10::intrusive_ptr<c10d::Work> DdpdBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& options) {
  const char* name = "all_gather_into_tensor (coalesced)";
  check_pairs(name, kNoOp, outputs, inputs);
  std::vector<at::Tensor> flat_inputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_data_move(name, inputs[i]);
    check_data_move(name, outputs[i]);
    check_same_dtype(name, inputs[0], inputs[i]);
    check_same_dtype(name, inputs[i], outputs[i]);
    if (outputs[i].numel() != inputs[i].numel() * size_) {
      not_served(name, kNoOp, outputs[i],
                 "output " + std::to_string(i) + " must have world_size (" + std::to_string(size_) +
                     ") times its input's " + std::to_string(inputs[i].numel()) +
                     " elements, got " + std::to_string(outputs[i].numel()));
    }
    flat_inputs.push_back(inputs[i].reshape({-1}));
  }
  at::Tensor flat_input = at::cat(flat_inputs);
  at::Tensor gathered = at::empty({size_ * flat_input.numel()}, flat_input.options());
  auto inner = shm()._allgather_base(gathered, flat_input, options);
  const int64_t row = flat_input.numel();
  return then_run(
      inner, outputs,
      [outputs, gathered, row, world = size_] {
        const at::Tensor rows = gathered.view({world, row});
        int64_t offset = 0;
        for (const at::Tensor& out : outputs) {
          const int64_t n = out.numel() / world;
          // reshape: [world, n] in row-major order, whatever the strides of `out`.
          out.copy_(rows.narrow(1, offset, n).reshape(out.sizes()));
          offset += n;
        }
      },
      rank_, c10d::OpType::COALESCED);
}

// Input i is [world, numel_i] (rank r's part of it is row r); the flat input puts, for each rank
// r, the rows r of every input end to end, so the flat reduce-scatter gives rank r its outputs
// end to end.
c10::intrusive_ptr<c10d::Work> DdpdBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& options) {
  const char* name = "reduce_scatter_tensor (coalesced)";
  const std::string op = op_name(options.reduceOp);
  check_pairs(name, op, outputs, inputs);
  std::vector<at::Tensor> by_rank;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_reduction(name, inputs[i], options.reduceOp);
    check_reduction(name, outputs[i], options.reduceOp);
    check_same_dtype(name, inputs[0], inputs[i]);
    check_same_dtype(name, inputs[i], outputs[i]);
    if (inputs[i].numel() != outputs[i].numel() * size_) {
      not_served(name, op, inputs[i],
                 "input " + std::to_string(i) + " must have world_size (" + std::to_string(size_) +
                     ") times its output's " + std::to_string(outputs[i].numel()) +
                     " elements, got " + std::to_string(inputs[i].numel()));
    }
    by_rank.push_back(inputs[i].reshape({size_, outputs[i].numel()}));
  }
  at::Tensor flat_input = at::cat(by_rank, 1).reshape({-1});  // [world, Σ numel_i], row-major
  at::Tensor flat_output = at::empty({total_numel(outputs)}, flat_input.options());
  auto inner = shm()._reduce_scatter_base(flat_output, flat_input, options);
  return then_run(
      inner, outputs,
      [outputs, flat_output, flat_input] {
        int64_t offset = 0;
        for (const at::Tensor& out : outputs) {
          out.copy_(flat_output.narrow(0, offset, out.numel()).view(out.sizes()));
          offset += out.numel();
        }
      },
      rank_, c10d::OpType::COALESCED);
}

}  // namespace ddpd_torch
