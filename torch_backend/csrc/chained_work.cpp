#include "chained_work.h"

#include <ATen/core/ivalue.h>

namespace ddpd_torch {
namespace {

class ChainedWork final : public c10d::Work {
 public:
  ChainedWork(std::vector<at::Tensor> outputs, int rank, c10d::OpType type)
      : c10d::Work(rank, type),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {}

  // The future first (its callbacks may read the values), then the Work's own wait().
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

}  // namespace

c10::intrusive_ptr<c10d::Work> then_run(const c10::intrusive_ptr<c10d::Work>& inner,
                                        std::vector<at::Tensor> outputs, std::function<void()> step,
                                        int rank, c10d::OpType type) {
  auto work = c10::make_intrusive<ChainedWork>(std::move(outputs), rank, type);
  // The callback holds the work until it runs; the inner future drops its callbacks once it
  // has run them, so no reference cycle outlives the collective.
  inner->getFuture()->addCallback([work, step = std::move(step)](c10::ivalue::Future& done) {
    if (done.hasError()) {
      work->complete(done.exception_ptr());
      return;
    }
    try {
      step();
    } catch (...) {
      work->complete(std::current_exception());
      return;
    }
    work->complete(nullptr);
  });
  return work;
}

}  // namespace ddpd_torch
