#include "ddpd_backend.h"

#include "chained_work.h"
#include "served.h"

namespace ddpd_torch {
namespace {

constexpr char kServed[] =
    "ddpd serves all_reduce, broadcast, all_gather, all_gather_into_tensor, "
    "reduce_scatter_tensor, reduce_scatter and barrier";
constexpr char kNone[] = "none";  // the "op" of a collective that does not reduce

at::Tensor first(const std::vector<at::Tensor>& tensors) {
  return tensors.empty() ? at::Tensor() : tensors[0];
}
at::Tensor first(const std::vector<std::vector<at::Tensor>>& lists) {
  return lists.empty() ? at::Tensor() : first(lists[0]);
}

// A contiguous stand-in for `tensor` (itself when it is contiguous): the shm group writes
// results as one run of bytes.
at::Tensor staged_for(const at::Tensor& tensor) {
  return tensor.is_contiguous() ? tensor : at::empty(tensor.sizes(), tensor.options());
}

// Whether every staged tensor is its target (all were contiguous): nothing to copy back.
bool all_same(const std::vector<at::Tensor>& staged, const std::vector<at::Tensor>& targets) {
  for (size_t i = 0; i < targets.size(); ++i) {
    if (!staged[i].is_same(targets[i])) return false;
  }
  return true;
}

// After `inner`: copies each staged result into its target where they differ.
std::function<void()> copy_back(std::vector<at::Tensor> targets, std::vector<at::Tensor> staged) {
  return [targets = std::move(targets), staged = std::move(staged)] {
    for (size_t i = 0; i < targets.size(); ++i) {
      if (!targets[i].is_same(staged[i])) targets[i].copy_(staged[i]);
    }
  };
}

}  // namespace

DdpdBackend::DdpdBackend(c10::intrusive_ptr<ddpd::shm::ShmProcessGroup> shm,
                         std::chrono::milliseconds timeout, WithoutGil without_gil)
    : c10d::Backend(shm->getRank(), shm->getSize()),
      shm_(std::move(shm)),
      timeout_(timeout),
      without_gil_(std::move(without_gil)) {}

void DdpdBackend::shutdown() {
  // Without the GIL: the executor may be waiting for it to run or drop a Python callback, and
  // joining it while holding the GIL would never return. The destructor joins both threads and
  // fails what is still queued.
  without_gil_([this] { shm_.reset(); });
}

ddpd::shm::ShmProcessGroup& DdpdBackend::shm() {
  TORCH_CHECK(shm_, "ddpd: this process group was shut down (destroy_process_group); create a ",
              "new one with init_process_group or new_group");
  return *shm_;
}

c10::intrusive_ptr<c10d::Backend::Options> DdpdBackend::getBackendOptions() {
  return c10::make_intrusive<Options>("ddpd", timeout_);
}

c10::intrusive_ptr<c10d::Work> DdpdBackend::divided(const c10::intrusive_ptr<c10d::Work>& inner,
                                                    const at::Tensor& sums, c10d::OpType type) {
  const int64_t world = size_;
  // Every rank holds the same sums, bit for bit, and divides them the same way: every rank gets
  // the same averages.
  return then_run(
      inner, {sums}, [sums, world] { sums.div_(world); }, rank_, type);
}

c10::intrusive_ptr<c10d::Work> DdpdBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                      const c10d::AllreduceOptions& options) {
  if (tensors.size() != 1) {
    not_served("all_reduce", op_name(options.reduceOp), first(tensors),
               "ddpd all-reduces one tensor per call, got " + std::to_string(tensors.size()));
  }
  check_reduction("all_reduce", tensors[0], options.reduceOp);
  if (!is_average(options.reduceOp)) return shm().allreduce(tensors, options);
  c10d::AllreduceOptions sum = options;
  sum.reduceOp = c10d::ReduceOp::SUM;
  return divided(shm().allreduce(tensors, sum), tensors[0], c10d::OpType::ALLREDUCE);
}

c10::intrusive_ptr<c10d::Work> DdpdBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                      const c10d::BroadcastOptions& options) {
  if (tensors.size() != 1) {
    not_served("broadcast", kNone, first(tensors),
               "ddpd broadcasts one tensor per call, got " + std::to_string(tensors.size()));
  }
  check_data_move("broadcast", tensors[0]);
  return shm().broadcast(tensors, options);
}

c10::intrusive_ptr<c10d::Work> DdpdBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                      std::vector<at::Tensor>& inputs,
                                                      const c10d::AllgatherOptions& options) {
  if (inputs.size() != 1 || outputs.size() != 1 || static_cast<int>(outputs[0].size()) != size_) {
    not_served("all_gather", kNone, first(inputs),
               "ddpd all-gathers one input into world_size (" + std::to_string(size_) +
                   ") outputs per call");
  }
  const at::Tensor& input = inputs[0];
  check_data_move("all_gather", input);
  std::vector<at::Tensor> staged;
  for (const at::Tensor& output : outputs[0]) {
    check_data_move("all_gather", output);
    check_same_dtype("all_gather", input, output);
    if (output.numel() != input.numel()) {
      not_served("all_gather", kNone, output,
                 "each output must have the input's " + std::to_string(input.numel()) +
                     " elements, got " + std::to_string(output.numel()));
    }
    staged.push_back(staged_for(output));
  }
  std::vector<std::vector<at::Tensor>> staged_outputs{staged};
  auto inner = shm().allgather(staged_outputs, inputs, options);
  if (all_same(staged, outputs[0])) return inner;
  return then_run(inner, outputs[0], copy_back(outputs[0], staged), rank_, c10d::OpType::ALLGATHER);
}

c10::intrusive_ptr<c10d::Work> DdpdBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                            const c10d::AllgatherOptions& options) {
  const char* name = "all_gather_into_tensor";
  check_data_move(name, input);
  check_data_move(name, output);
  check_same_dtype(name, input, output);
  if (output.numel() != input.numel() * size_) {
    not_served(name, kNone, output,
               "its output must have world_size (" + std::to_string(size_) +
                   ") times the input's " + std::to_string(input.numel()) + " elements, got " +
                   std::to_string(output.numel()));
  }
  at::Tensor staged = staged_for(output);
  auto inner = shm()._allgather_base(staged, input, options);
  if (staged.is_same(output)) return inner;
  return then_run(inner, {output}, copy_back({output}, {staged}), rank_,
                  c10d::OpType::_ALLGATHER_BASE);
}

c10::intrusive_ptr<c10d::Work> DdpdBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& options) {
  const char* name = "reduce_scatter_tensor";
  const c10d::ReduceOp& op = options.reduceOp;
  check_reduction(name, input, op);
  check_reduction(name, output, op);
  check_same_dtype(name, input, output);
  if (op.op_ != c10d::ReduceOp::SUM && !is_average(op)) {
    not_served(name, op_name(op), input, "ddpd's reduce_scatter_tensor sums: SUM or AVG");
  }
  if (input.numel() != output.numel() * size_) {
    not_served(name, op_name(op), input,
               "its input must have world_size (" + std::to_string(size_) +
                   ") times the output's " + std::to_string(output.numel()) + " elements, got " +
                   std::to_string(input.numel()));
  }
  c10d::ReduceScatterOptions sum = options;
  sum.reduceOp = c10d::ReduceOp::SUM;
  at::Tensor staged = staged_for(output);
  auto inner = shm()._reduce_scatter_base(staged, input, sum);
  if (staged.is_same(output)) {
    return is_average(op) ? divided(inner, output, c10d::OpType::_REDUCE_SCATTER_BASE) : inner;
  }
  if (is_average(op)) inner = divided(inner, staged, c10d::OpType::_REDUCE_SCATTER_BASE);
  return then_run(inner, {output}, copy_back({output}, {staged}), rank_,
                  c10d::OpType::_REDUCE_SCATTER_BASE);
}

c10::intrusive_ptr<c10d::Work> DdpdBackend::barrier(const c10d::BarrierOptions& options) {
  return shm().barrier(options);
}

// Not served yet (issue 63 lists them for the next slices).

c10::intrusive_ptr<c10d::Work> DdpdBackend::allreduce_sparse(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& options) {
  not_served("all_reduce", op_name(options.reduceOp), first(tensors),
             "ddpd serves dense (strided) tensors only, not sparse ones");
}

c10::intrusive_ptr<c10d::Work> DdpdBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& options) {
  not_served("all_reduce_coalesced", op_name(options.reduceOp), first(tensors), kServed);
}

c10::intrusive_ptr<c10d::Work> DdpdBackend::reduce(std::vector<at::Tensor>& tensors,
                                                   const c10d::ReduceOptions& options) {
  not_served("reduce", op_name(options.reduceOp), first(tensors), kServed);
}

c10::intrusive_ptr<c10d::Work> DdpdBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  not_served("all_gather_coalesced", kNone, first(inputs), kServed);
}

c10::intrusive_ptr<c10d::Work> DdpdBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  not_served("all_gather_into_tensor (coalesced)", kNone, first(inputs), kServed);
}

c10::intrusive_ptr<c10d::Work> DdpdBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                   std::vector<at::Tensor>& inputs,
                                                   const c10d::GatherOptions&) {
  not_served("gather", kNone, first(inputs), kServed);
}

c10::intrusive_ptr<c10d::Work> DdpdBackend::scatter(std::vector<at::Tensor>& outputs,
                                                    std::vector<std::vector<at::Tensor>>& inputs,
                                                    const c10d::ScatterOptions&) {
  not_served("scatter", kNone, first(outputs), kServed);
}

c10::intrusive_ptr<c10d::Work> DdpdBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& options) {
  const char* name = "reduce_scatter";
  if (outputs.size() != 1 || inputs.size() != 1 || static_cast<int>(inputs[0].size()) != size_) {
    not_served(name, op_name(options.reduceOp), first(outputs),
               "ddpd reduce-scatters world_size (" + std::to_string(size_) +
                   ") inputs into one output per call");
  }
  std::vector<at::Tensor> flat_inputs;
  for (const at::Tensor& input : inputs[0]) {
    check_reduction(name, input, options.reduceOp);
    check_same_dtype(name, outputs[0], input);
    if (input.numel() != outputs[0].numel()) {
      not_served(name, op_name(options.reduceOp), input,
                 "each input must have the output's " + std::to_string(outputs[0].numel()) +
                     " elements, got " + std::to_string(input.numel()));
    }
    flat_inputs.push_back(input.reshape({-1}));
  }
  // One copy on the launching thread into the flat form the shm group reduce-scatters.
  at::Tensor flat = at::cat(flat_inputs);
  return _reduce_scatter_base(outputs[0], flat, options);
}

c10::intrusive_ptr<c10d::Work> DdpdBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& options) {
  not_served("reduce_scatter_tensor (coalesced)", op_name(options.reduceOp), first(inputs),
             kServed);
}

c10::intrusive_ptr<c10d::Work> DdpdBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                          std::vector<int64_t>&,
                                                          std::vector<int64_t>&,
                                                          const c10d::AllToAllOptions&) {
  not_served("all_to_all_single", kNone, input, kServed);
}

c10::intrusive_ptr<c10d::Work> DdpdBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllToAllOptions&) {
  not_served("all_to_all", kNone, first(inputs), kServed);
}

c10::intrusive_ptr<c10d::Work> DdpdBackend::send(std::vector<at::Tensor>& tensors, int, int) {
  not_served("send", kNone, first(tensors), "ddpd has no point-to-point transfers yet");
}

c10::intrusive_ptr<c10d::Work> DdpdBackend::recv(std::vector<at::Tensor>& tensors, int, int) {
  not_served("recv", kNone, first(tensors), "ddpd has no point-to-point transfers yet");
}

c10::intrusive_ptr<c10d::Work> DdpdBackend::recvAnysource(std::vector<at::Tensor>& tensors, int) {
  not_served("recv (any source)", kNone, first(tensors),
             "ddpd has no point-to-point transfers yet");
}

}  // namespace ddpd_torch
