#include "ddpd/common/training_result.h"

#include <algorithm>
#include <cmath>

#include "ddpd/common/median.h"

namespace ddpd {

TrainingSummary summarize(const std::vector<StepMetrics>& steps, int64_t warmup_steps) {
  TrainingSummary s;
  if (steps.empty()) return s;
  const size_t first = static_cast<size_t>(warmup_steps) < steps.size() ? warmup_steps : 0;
  std::vector<double> times, fractions;
  for (size_t i = first; i < steps.size(); ++i) {
    times.push_back(steps[i].step_seconds);
    fractions.push_back(steps[i].comm_fraction);
  }
  for (const auto& m : steps) {
    if (m.param_spread) s.max_param_spread = std::max(s.max_param_spread, *m.param_spread);
  }
  s.final_loss = steps.back().loss;
  s.median_step_seconds = median(times);
  double mean = 0;
  for (double t : times) mean += t / times.size();
  double var = 0;
  for (double t : times) var += (t - mean) * (t - mean);
  s.std_step_seconds = times.size() > 1 ? std::sqrt(var / (times.size() - 1)) : 0.0;
  s.median_comm_fraction = median(fractions);
  const double tokens = steps.back().tokens_per_second * steps.back().step_seconds;
  s.tokens_per_second = s.median_step_seconds > 0 ? tokens / s.median_step_seconds : 0;
  return s;
}

}  // namespace ddpd
