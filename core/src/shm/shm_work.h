#pragma once
// A collective's handle whose completer says when it is done: first its future (running the
// Communicator's span and journal callbacks, DDP's comm hooks, `then`), then the Work itself, so
// a future callback already sees the values wait() returns with. The shm group's executor
// completes its own; torch_backend's chained works (a step after a collective) use it too.

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <exception>
#include <vector>

namespace ddpd::shm {

// Thread contract: complete() once, from any thread; the rest as c10d::Work.
class ShmWork final : public c10d::Work {
 public:
  explicit ShmWork(std::vector<at::Tensor> outputs, int rank = -1,
                   c10d::OpType type = c10d::OpType::UNKNOWN)
      : c10d::Work(rank, type),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {}

  // Null: the outputs are the future's value.
  void complete(std::exception_ptr error) {
    if (error) {
      future_->setError(error);
      finish(error);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
      finish();
    }
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  std::vector<at::Tensor> result() override { return outputs_; }

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace ddpd::shm
