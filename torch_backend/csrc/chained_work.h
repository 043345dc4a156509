#pragma once
// A collective's Work that completes only after a step that must follow the collective: copying
// a staged result into a non-contiguous output (the shm group and Gloo write contiguous bytes).
// Its future carries the outputs, as the shm group's own works do, so DDP's comm hooks
// (`fut.value()[0]`) and `async_op=True` see the finished values.

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <functional>
#include <vector>

namespace ddpd_torch {

// Returns a Work that completes when `inner` has completed and `step` has run, on the thread
// that completes `inner` (the shm group's executor), before any callback of the returned future.
// An error in `inner` or in `step` reaches both wait() and the future. `outputs` are the
// caller's tensors, the future's value.
c10::intrusive_ptr<c10d::Work> then_run(const c10::intrusive_ptr<c10d::Work>& inner,
                                        std::vector<at::Tensor> outputs, std::function<void()> step,
                                        int rank, c10d::OpType type);

}  // namespace ddpd_torch
