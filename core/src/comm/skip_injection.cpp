#include "comm/skip_injection.h"

#include <cstdio>

namespace ddpd::detail {
namespace {

// What stands for a dropped collective: complete at once, its future too (the recorder reads
// the span's end from it), with no result.
class DroppedWork final : public c10d::Work {
 public:
  DroppedWork()
      : future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {
    future_->markCompleted(c10::IValue(std::vector<at::Tensor>()));
    finish();
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace

SkipInjectingBackend::SkipInjectingBackend(c10::intrusive_ptr<c10d::Backend> inner,
                                           std::shared_ptr<std::atomic<bool>> armed)
    : DecoratingBackend(std::move(inner)), armed_(std::move(armed)) {}

c10::intrusive_ptr<c10d::Work> SkipInjectingBackend::intercept(
    const LaunchedCollective& collective) {
  if (!armed_->exchange(false)) return {};
  std::fprintf(stderr, "ddpd: inject skip-collective rank %d drops its next collective, %s\n",
               getRank(), collective.op);
  std::fflush(stderr);
  return c10::make_intrusive<DroppedWork>();
}

}  // namespace ddpd::detail
