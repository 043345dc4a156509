#include "train/fault_injector.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include "comm/skip_injection.h"
#include "ddpd/common/fault_injection.h"
#include "ddpd/common/unix_time.h"
#include "ddpd/core/trainer.h"

namespace ddpd::detail {
namespace {

// A crash during a checkpoint writes this much of the rank's file, then the process is gone.
constexpr int64_t kCrashAfterBytes = 4096;
constexpr auto kHangPoll = std::chrono::milliseconds(20);

void announce(const FaultInjection& fault, int64_t step) {
  std::fprintf(stderr, "ddpd: inject %s rank %d step %lld at unix %.3f\n",
               enum_name(fault.kind).c_str(), fault.rank, static_cast<long long>(step), unix_now());
  std::fflush(stderr);
}

}  // namespace

FaultInjector::FaultInjector(const std::optional<FaultInjection>& injection, int rank) {
  if (injection && injection->rank == rank) fault_ = injection;
}

void FaultInjector::at_step_start(int64_t step, Communicator& comm,
                                  const std::function<bool()>& cancelled) {
  if (!fault_ || step != fault_->step || fault_->kind == FaultKind::kSlow ||
      fault_->kind == FaultKind::kCrashDuringCheckpoint ||
      fault_->kind == FaultKind::kExitDuringHeal || fault_->kind == FaultKind::kExitAfterUpdate) {
    return;  // slow stretches compute; the others fire in a checkpoint, a heal or an update
  }
  announce(*fault_, step);
  if (fault_->kind == FaultKind::kExit) std::_Exit(3);
  if (fault_->kind == FaultKind::kSkipCollective) {
    // The switch exists when connect() saw this rank's skip-collective (apply_job_options).
    if (!detail::arm_skip_collective(comm)) {
      throw std::logic_error(
          "--inject skip-collective: this rank's communicator has no switch to drop a collective");
    }
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  const auto length = std::chrono::duration<double>(fault_->seconds);
  while (fault_->seconds <= 0 || std::chrono::steady_clock::now() - start < length) {
    if (cancelled && cancelled()) throw JobCancelled("job cancelled");
    std::this_thread::sleep_for(kHangPoll);
  }
}

void FaultInjector::stretch_compute(int64_t step, double compute_seconds) {
  if (!fault_ || fault_->kind != FaultKind::kSlow || step < fault_->step) return;
  if (step == fault_->step) announce(*fault_, step);
  std::this_thread::sleep_for(
      std::chrono::duration<double>((fault_->factor - 1) * compute_seconds));
}

void FaultInjector::after_optimizer_update(int64_t step) {
  if (!fault_ || fault_->kind != FaultKind::kExitAfterUpdate || step != fault_->step) return;
  announce(*fault_, step);
  std::_Exit(3);
}

void FaultInjector::during_state_transfer(int64_t resumed_step) {
  if (!fault_ || fault_->kind != FaultKind::kExitDuringHeal || resumed_step < fault_->step) return;
  announce(*fault_, resumed_step);
  std::_Exit(3);
}

int64_t FaultInjector::checkpoint_crash_bytes(int64_t steps_done) const {
  const bool fires =
      fault_ && fault_->kind == FaultKind::kCrashDuringCheckpoint && steps_done > fault_->step;
  return fires ? kCrashAfterBytes : 0;
}

}  // namespace ddpd::detail
