#include "ddpd_backend.h"

#include "chained_work.h"
#include "shm/served.h"
#include "staging.h"

namespace ddpd_torch {

using ddpd::detail::op_name;
using ddpd::shm::check_data_move;
using ddpd::shm::check_reduction;
using ddpd::shm::check_same_dtype;
using ddpd::shm::kNoOp;
using ddpd::shm::not_served;

DdpdBackend::DdpdBackend(c10::intrusive_ptr<ddpd::shm::ShmProcessGroup> shm,
                         c10::intrusive_ptr<c10d::Backend> companion,
                         std::chrono::milliseconds timeout, WithoutGil without_gil)
    : c10d::Backend(shm->getRank(), shm->getSize()),
      shm_(std::move(shm)),
      companion_(std::move(companion)),
      timeout_(timeout),
      without_gil_(std::move(without_gil)) {}

void DdpdBackend::shutdown() {
  // Without the GIL: the executor may be waiting for it to run or drop a Python callback, and
  // joining it while holding the GIL would never return. The destructors join the threads and
  // fail what is still queued.
  without_gil_([this] {
    p2p_->stop();
    shm_.reset();
    companion_.reset();
  });
}

ddpd::shm::ShmProcessGroup& DdpdBackend::shm() {
  TORCH_CHECK(shm_, "ddpd: this process group was shut down (destroy_process_group); create a ",
              "new one with init_process_group or new_group");
  return *shm_;
}

c10d::Backend& DdpdBackend::companion() {
  TORCH_CHECK(companion_, "ddpd: this process group was shut down (destroy_process_group); ",
              "create a new one with init_process_group or new_group");
  return *companion_;
}

c10::intrusive_ptr<c10d::Backend::Options> DdpdBackend::getBackendOptions() {
  return c10::make_intrusive<Options>("ddpd", timeout_);
}

// The shm group checks op, dtype and device at launch; it reduces every op in its reduce phase
// (AVG included), and stages non-contiguous tensors itself.
c10::intrusive_ptr<c10d::Work> DdpdBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                      const c10d::AllreduceOptions& options) {
  return shm().allreduce(tensors, options);
}

c10::intrusive_ptr<c10d::Work> DdpdBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                      const c10d::BroadcastOptions& options) {
  return shm().broadcast(tensors, options);
}

c10::intrusive_ptr<c10d::Work> DdpdBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                      std::vector<at::Tensor>& inputs,
                                                      const c10d::AllgatherOptions& options) {
  if (inputs.size() != 1 || outputs.size() != 1 || static_cast<int>(outputs[0].size()) != size_) {
    not_served("all_gather", kNoOp, first(inputs),
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
      not_served("all_gather", kNoOp, output,
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
    not_served(name, kNoOp, output,
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
  if (input.numel() != output.numel() * size_) {
    not_served(name, op_name(op), input,
               "its input must have world_size (" + std::to_string(size_) +
                   ") times the output's " + std::to_string(output.numel()) + " elements, got " +
                   std::to_string(input.numel()));
  }
  at::Tensor staged = staged_for(output);
  auto inner = shm()._reduce_scatter_base(staged, input, options);
  if (staged.is_same(output)) return inner;
  return then_run(inner, {output}, copy_back({output}, {staged}), rank_,
                  c10d::OpType::_REDUCE_SCATTER_BASE);
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

c10::intrusive_ptr<c10d::Work> DdpdBackend::barrier(const c10d::BarrierOptions& options) {
  return shm().barrier(options);
}

}  // namespace ddpd_torch
