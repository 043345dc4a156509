// What `ddpctl whatif` replays (StepProfile in ddpd/common/training_result.h, docs/whatif.md):
// each measured step's phases and collectives, and each gradient's ready time in the last
// backward, kept for the last kProfiledSteps steps.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

#include "ddpd/common/training_result.h"
#include "ddpd/core/communicator.h"
#include "train/step_timing.h"

namespace ddpd::detail {

class GradReadyHooks;

// Thread contract: constructed, record() and take() on the training thread. The ready hooks run
// on autograd's thread, which for CPU tensors is the one calling backward(); their times are
// read only after backward() has returned.
class StepRecorder {
 public:
  // Times gradients' readiness when `record_gradients` (whole gradients on the host clock: the
  // replicated strategies on CPU); phases and collectives always.
  StepRecorder(torch::nn::Module& model, std::function<double()> clock, bool record_gradients,
               int host_cores);
  ~StepRecorder();

  // One measured step, on the communicator's clock.
  void record(int64_t step, const StepMarks& marks, const StepTiming& timing,
              const std::vector<CommSpan>& collectives);
  const StepProfile& profile() const { return profile_; }

 private:
  StepProfile profile_;
  std::function<double()> clock_;
  std::vector<double> ready_clock_;  // each gradient's last ready time, clock seconds
  std::unique_ptr<GradReadyHooks> hooks_;
};

// The step relative to its start (pure; tests/unit/step_profile_test.cpp). `ready_clock` holds
// each gradient's last ready time on the same clock (negative: never).
ProfiledStep profile_step(int64_t step, const StepMarks& marks, const StepTiming& timing,
                          const std::vector<CommSpan>& collectives,
                          const std::vector<double>& ready_clock);

}  // namespace ddpd::detail
