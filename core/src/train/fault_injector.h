// --inject (ddpd/common/fault_injection.h) on this rank: the one injector, handed to the Trainer,
// which fires it at the start of a step, stretches compute with it, and asks it how much of a
// checkpoint file to write before the process dies. The tests inject with it too (ddpd-test-rank
// takes the job flags).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "ddpd/common/fault_injection.h"
#include "ddpd/core/communicator.h"

namespace ddpd::detail {

// Thread contract: the training thread's, like the Trainer that owns it.
class FaultInjector {
 public:
  // `injection`: the job's --inject, of any rank (this rank fires only its own); none: inert.
  FaultInjector(const std::optional<FaultInjection>& injection, int rank);

  bool armed() const { return fault_.has_value(); }

  // At the start of `step`: exit (status 3), skip the communicator's next collective, or hang
  // (polling `cancelled` every 20 ms; JobCancelled when it says so). Prints
  // "ddpd: inject KIND rank R step S at unix T" to stderr as it fires.
  void at_step_start(int64_t step, Communicator& comm, const std::function<bool()>& cancelled);
  // --inject slow, from its step on: sleeps (factor - 1) × the step's compute seconds.
  void stretch_compute(int64_t step, double compute_seconds);
  // exit-after-update, right after this rank's optimizer update of `step`: exits (status 3).
  void after_optimizer_update(int64_t step);
  // exit-during-heal, halfway through a heal's state transfer (after the parameters) that
  // resumes at `resumed_step`: exits (status 3) when it is at or after the injection's step.
  void during_state_transfer(int64_t resumed_step);
  // crash-during-checkpoint: the bytes of its file a checkpoint of `steps_done` steps writes
  // before the process exits (0: the whole file, no crash).
  int64_t checkpoint_crash_bytes(int64_t steps_done) const;

 private:
  std::optional<FaultInjection> fault_;
};

}  // namespace ddpd::detail
