#include "comm/skip_injection.h"

#include <cstdio>

#include "comm/communicator_internals.h"

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

SkipInjectingBackend::SkipInjectingBackend(c10::intrusive_ptr<c10d::Backend> inner)
    : DecoratingBackend(std::move(inner)) {}

c10::intrusive_ptr<c10d::Work> SkipInjectingBackend::intercept(
    const LaunchedCollective& collective) {
  if (!armed_.exchange(false)) return {};
  std::fprintf(stderr, "ddpd: inject skip-collective rank %d drops its next collective, %s\n",
               getRank(), collective.op);
  std::fflush(stderr);
  return c10::make_intrusive<DroppedWork>();
}

bool arm_skip_collective(Communicator& comm) {
  if (!comm.info().inject_skip_collective) return false;
  // The outermost wrapper (the Communicator's constructor stacks it last); none at world size 1.
  if (auto* skip = dynamic_cast<SkipInjectingBackend*>(CommunicatorAccess::backend(comm))) {
    skip->arm();
  }
  return true;
}

}  // namespace ddpd::detail
