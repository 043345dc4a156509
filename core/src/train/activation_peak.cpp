#include "train/activation_peak.h"

#include <algorithm>

#include "device/counting_allocator.h"
#include "train/activation_checkpoint.h"

namespace ddpd::detail {

void ActivationPeak::begin_step() {
  gathered_first_ = -1;
  activation_peak_ = 0;
  tensor_peak_ = peak_cpu_tensor_bytes();
}

void ActivationPeak::fold_window() {
  tensor_peak_ = std::max(tensor_peak_, peak_cpu_tensor_bytes());
}

void ActivationPeak::begin_forward(int64_t gathered_parameter_bytes) {
  fold_window();
  reset_cpu_tensor_peak();
  reset_recompute_rise();
  baseline_ = live_cpu_tensor_bytes();
  gathered_at_begin_ = gathered_parameter_bytes;
}

void ActivationPeak::end_forward(int64_t gathered_parameter_bytes) {
  // Under accumulation the strategy's peak already holds the first micro-batch's gathers, so a
  // later forward's own are taken to be the first's (the same units, in the same order).
  int64_t gathered = gathered_parameter_bytes - gathered_at_begin_;
  if (gathered_first_ < 0) gathered_first_ = gathered;
  gathered = std::max(gathered, gathered_first_);
  const int64_t forward_peak = peak_cpu_tensor_bytes() - baseline_ - gathered;
  forward_end_activations_ = live_cpu_tensor_bytes() - baseline_ - gathered;
  activation_peak_ = std::max(activation_peak_, forward_peak);
}

void ActivationPeak::end_backward() {
  fold_window();
  const int64_t rise = max_recompute_rise_bytes();
  if (rise > 0) activation_peak_ = std::max(activation_peak_, forward_end_activations_ + rise);
}

int64_t ActivationPeak::step_peak_tensor_bytes() const {
  return std::max(tensor_peak_, peak_cpu_tensor_bytes());
}

}  // namespace ddpd::detail
