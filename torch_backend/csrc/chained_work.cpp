#include "chained_work.h"

#include "shm/shm_work.h"

namespace ddpd_torch {

c10::intrusive_ptr<c10d::Work> then_run(const c10::intrusive_ptr<c10d::Work>& inner,
                                        std::vector<at::Tensor> outputs, std::function<void()> step,
                                        int rank, c10d::OpType type) {
  auto work = c10::make_intrusive<ddpd::shm::ShmWork>(std::move(outputs), rank, type);
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
