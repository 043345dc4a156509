// memory.step_peak_activation_bytes (docs/metrics.md#memory): the activations of a step at their
// highest, from the counting allocator's live CPU tensor bytes (device/counting_allocator.h).
//
// What counts: over each micro-batch's forward, the live bytes at their highest above where
// they stood when that forward began (the tensors autograd saves for backward, and the forward's
// transient ones), less the full parameters fsdp gathered meanwhile (its own count of unsharded
// parameter bytes, UnshardedPeak). Gradients are not counted: none exists yet during a forward
// (the earlier micro-batches' are in the baseline). Under --activation-checkpointing the
// backward adds, one segment at a time, the tensors of its recompute; their rise (the allocator's
// live bytes after the recompute less before it, activation_checkpoint.h) is added to the
// activations alive at the forward's end, an upper bound, since backward has freed some of
// those by then. The backward's gradients of activations are not counted in either mode.
//
// The trainer resets the allocator's peak at each forward; so that memory.step_peak_tensor_bytes
// still covers the whole step, each window's peak is folded into step_peak_tensor_bytes().
//
// Thread contract: the trainer's thread only.
#pragma once

#include <cstdint>

namespace ddpd::detail {

class ActivationPeak {
 public:
  // At train_step's start, with the allocator's peak just reset.
  void begin_step();
  // Around one micro-batch: `gathered_parameter_bytes` is the strategy's peak of unsharded
  // parameter bytes since zero_grad (UnshardedPeak::parameter_bytes) at that point.
  void begin_forward(int64_t gathered_parameter_bytes);
  void end_forward(int64_t gathered_parameter_bytes);
  void end_backward();

  int64_t step_peak_activation_bytes() const { return activation_peak_; }
  // The allocator's peak over the whole step so far (every window since begin_step).
  int64_t step_peak_tensor_bytes() const;

 private:
  void fold_window();

  int64_t baseline_ = 0;
  int64_t gathered_at_begin_ = 0;
  int64_t gathered_first_ = -1;  // what the first micro-batch's forward gathered
  int64_t forward_end_activations_ = 0;
  int64_t activation_peak_ = 0;
  int64_t tensor_peak_ = 0;
};

}  // namespace ddpd::detail
