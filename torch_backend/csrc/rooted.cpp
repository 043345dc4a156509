// The "ddpd" backend's rooted collectives: reduce on the shm group (an all-reduce whose result
// only the root keeps), gather and scatter on the Gloo companion (as bytes, staging.h: any dtype).
// None is on DDP's or FSDP2's path; scripts that call them get them correct, with the group's
// timeout and its dead-peer errors.

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

void check_root(const char* name, const std::string& op, const at::Tensor& example, int64_t root,
                int size) {
  if (root < 0 || root >= size) {
    not_served(
        name, op, example,
        "its root rank " + std::to_string(root) + " is not in [0, " + std::to_string(size) + ")");
  }
}

// A contiguous tensor's bytes as one flat uint8 vector: gather and scatter compare whole
// tensors, whose shapes the caller may give differently with the same element count.
at::Tensor flat_bytes_of(const at::Tensor& tensor) {
  return with_contiguous_strides(tensor.reshape({-1})).view(at::kByte);
}

// Checks `list` (the root's gather or scatter list): world_size tensors, each of `example`'s
// dtype and element count.
void check_list(const char* name, const std::vector<at::Tensor>& list, const at::Tensor& example,
                int size) {
  if (static_cast<int>(list.size()) != size) {
    not_served(name, kNoOp, example,
               "the root's list must hold world_size (" + std::to_string(size) + ") tensors, got " +
                   std::to_string(list.size()));
  }
  for (const at::Tensor& t : list) {
    check_data_move(name, t);
    check_same_dtype(name, example, t);
    if (t.numel() != example.numel()) {
      not_served(name, kNoOp, t,
                 "each tensor of the list must have " + std::to_string(example.numel()) +
                     " elements, got " + std::to_string(t.numel()));
    }
  }
}

std::vector<at::Tensor> bytes_of_each(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> bytes;
  for (const at::Tensor& t : tensors) bytes.push_back(flat_bytes_of(t));
  return bytes;
}

}  // namespace

// The root's result is the all-reduce's, bit for bit (rank order); the other ranks all-reduce a
// copy and keep their tensor as it was. An all-reduce moves more than a reduce would: correct
// first, as neither DDP nor FSDP2 calls it.
c10::intrusive_ptr<c10d::Work> DdpdBackend::reduce(std::vector<at::Tensor>& tensors,
                                                   const c10d::ReduceOptions& options) {
  const char* name = "reduce";
  const std::string op = op_name(options.reduceOp);
  if (tensors.size() != 1) {
    not_served(name, op, first(tensors),
               "ddpd reduces one tensor per call, got " + std::to_string(tensors.size()));
  }
  check_reduction(name, tensors[0], options.reduceOp);
  check_root(name, op, tensors[0], options.rootRank, size_);
  c10d::AllreduceOptions all_reduce;
  all_reduce.reduceOp = options.reduceOp;
  all_reduce.timeout = options.timeout;
  if (rank_ == options.rootRank) return shm().allreduce(tensors, all_reduce);
  std::vector<at::Tensor> scratch{tensors[0].clone(at::MemoryFormat::Contiguous)};
  auto inner = shm().allreduce(scratch, all_reduce);
  return then_run(
      inner, tensors, [scratch] {}, rank_, c10d::OpType::REDUCE);
}

c10::intrusive_ptr<c10d::Work> DdpdBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                   std::vector<at::Tensor>& inputs,
                                                   const c10d::GatherOptions& options) {
  const char* name = "gather";
  if (inputs.size() != 1) {
    not_served(name, kNoOp, first(inputs),
               "ddpd gathers one tensor per call, got " + std::to_string(inputs.size()));
  }
  check_data_move(name, inputs[0]);
  check_root(name, kNoOp, inputs[0], options.rootRank, size_);
  at::Tensor input = inputs[0].contiguous();
  std::vector<at::Tensor> in_bytes{flat_bytes_of(input)};
  std::vector<at::Tensor> targets, staged;
  std::vector<std::vector<at::Tensor>> out_bytes;
  if (rank_ == options.rootRank) {
    if (outputs.size() != 1) not_served(name, kNoOp, input, "the root gathers into one list");
    targets = outputs[0];
    check_list(name, targets, input, size_);
    for (const at::Tensor& t : targets) staged.push_back(staged_for(t));
    out_bytes.push_back(bytes_of_each(staged));
  } else if (!outputs.empty() && !outputs[0].empty()) {
    not_served(name, kNoOp, input, "only the root rank passes a gather list");
  }
  auto inner = companion().gather(out_bytes, in_bytes, options);
  // Always chained: Gloo's future carries byte views; the caller's are `targets` (and `input`,
  // kept alive until Gloo has sent it).
  return then_run(
      inner, targets, [copy = copy_back(targets, staged), input] { copy(); }, rank_,
      c10d::OpType::GATHER);
}

c10::intrusive_ptr<c10d::Work> DdpdBackend::scatter(std::vector<at::Tensor>& outputs,
                                                    std::vector<std::vector<at::Tensor>>& inputs,
                                                    const c10d::ScatterOptions& options) {
  const char* name = "scatter";
  if (outputs.size() != 1) {
    not_served(name, kNoOp, first(outputs),
               "ddpd scatters into one tensor per call, got " + std::to_string(outputs.size()));
  }
  check_data_move(name, outputs[0]);
  check_root(name, kNoOp, outputs[0], options.rootRank, size_);
  at::Tensor staged = staged_for(outputs[0]);
  std::vector<at::Tensor> out_bytes{flat_bytes_of(staged)};
  std::vector<at::Tensor> sources;
  std::vector<std::vector<at::Tensor>> in_bytes;
  if (rank_ == options.rootRank) {
    if (inputs.size() != 1) not_served(name, kNoOp, staged, "the root scatters one list");
    check_list(name, inputs[0], staged, size_);
    for (const at::Tensor& t : inputs[0]) sources.push_back(t.contiguous());
    in_bytes.push_back(bytes_of_each(sources));
  } else if (!inputs.empty() && !inputs[0].empty()) {
    not_served(name, kNoOp, staged, "only the root rank passes a scatter list");
  }
  auto inner = companion().scatter(out_bytes, in_bytes, options);
  return then_run(
      inner, outputs, [copy = copy_back(outputs, {staged}), sources] { copy(); }, rank_,
      c10d::OpType::SCATTER);
}

}  // namespace ddpd_torch
