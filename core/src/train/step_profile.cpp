#include "train/step_profile.h"

#include "ddpd/core/model.h"
#include "strategies/synchronizer_base.h"

namespace ddpd::detail {

StepRecorder::StepRecorder(torch::nn::Module& model, std::function<double()> clock,
                           bool record_gradients, int host_cores)
    : clock_(std::move(clock)) {
  profile_.host_cores = host_cores;
  if (!record_gradients) return;
  std::vector<torch::Tensor> params;
  for (const auto& [name, p] : named_unique_parameters(model)) {
    if (!p.requires_grad()) continue;
    profile_.gradients.push_back({name, static_cast<int64_t>(p.nbytes())});
    params.push_back(p);
  }
  ready_clock_.assign(params.size(), -1.0);
  hooks_ =
      std::make_unique<GradReadyHooks>(params, [this](size_t i) { ready_clock_[i] = clock_(); });
}

StepRecorder::~StepRecorder() = default;

void StepRecorder::record(int64_t step, const StepMarks& marks, const StepTiming& timing,
                          const std::vector<CommSpan>& collectives) {
  profile_.steps.push_back(profile_step(step, marks, timing, collectives, ready_clock_));
  if (profile_.steps.size() > kProfiledSteps) profile_.steps.erase(profile_.steps.begin());
}

ProfiledStep profile_step(int64_t step, const StepMarks& marks, const StepTiming& timing,
                          const std::vector<CommSpan>& collectives,
                          const std::vector<double>& ready_clock) {
  ProfiledStep p;
  const double t0 = marks.start;
  p.step = step;
  p.step_s = timing.step_seconds;
  p.zero_grad_s = marks.zeroed - marks.start;
  p.forward_s = timing.forward_seconds;
  p.backward_s = timing.backward_seconds;
  const auto& mm = marks.micro_marks;
  const double backward_start = mm.size() >= 3 ? mm[mm.size() - 2] : marks.gathered;
  const double backward_end = mm.empty() ? marks.gathered : mm.back();
  p.last_backward_start_s = backward_start - t0;
  p.last_backward_end_s = backward_end - t0;
  p.synced_s = marks.synced - t0;
  p.optimizer_s = timing.optimizer_seconds;
  p.overlapped_optimizer_s = marks.overlapped_optimizer_seconds;
  for (double ready : ready_clock) {
    // Ready before the last backward started: an earlier micro-batch's, not this one's.
    p.ready_s.push_back(ready >= backward_start ? ready - backward_start : -1.0);
  }
  for (const auto& c : collectives) {
    p.collectives.push_back({c.name, c.op, c.bytes, c.launch_s - t0, c.complete_s - t0});
  }
  return p;
}

}  // namespace ddpd::detail
