// Activation checkpointing (--activation-checkpointing; docs/activation-checkpointing.md):
// a segment of the forward that keeps only its inputs for backward and runs again, with
// gradients on, when backward reaches it.
//
// Why a Function of our own: LibTorch has no torch.utils.checkpoint. This is its reentrant
// variant (use_reentrant=True): forward runs the segment with grad mode off (nothing saved but
// the inputs); backward detaches the inputs, runs the segment again with grad mode on, and
// backpropagates the incoming gradient through that new graph with a nested
// torch::autograd::backward. The segment's parameters are leaves of the nested graph, so their
// gradients accumulate through their own AccumulateGrad nodes: the post-hooks that overlap,
// bucketed and fsdp register there fire once per parameter, inside the segment's backward,
// where they fire without checkpointing too. fsdp needs nothing more: its hook on the unit's
// output (after_unit_forward) gathers the unit, and starts the next unit's prefetch, before
// this backward runs, so the recompute reads the gathered parameters.
//
// Bitwise: the recompute runs the same kernels on the same values in the same order, and the
// nested graph's nodes keep the relative sequence numbers they had, so the engine orders them,
// and sums each tensor's incoming gradients, as without checkpointing. An input used twice (a
// block's residual) gets its two contributions summed at its leaf instead of at the node that
// made it: a + b either way, and IEEE addition commutes. tests/unit/activation_checkpoint_test
// and tests/multirank/activation_checkpoint_equivalence_test check it, bit for bit.
//
// Thread contract: runs on the thread that runs forward and, for backward, the thread autograd
// runs CPU backward on (the caller of backward()); `segment` must be a pure function of its
// inputs and of parameters that do not change between the forward and the backward (no
// randomness: the model has no dropout); it is copied, so what it captures must be captured by
// value (a module's holder, not a reference to a local).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

namespace ddpd::detail {

using Segment = std::function<torch::Tensor(const std::vector<torch::Tensor>&)>;

// segment(inputs), keeping only `inputs` for backward. Without grad mode, or when no input
// requires a gradient, it is just segment(inputs) (the caller checks the latter: a segment whose
// parameters alone need gradients would lose them, as with torch.utils.checkpoint's reentrant
// variant).
torch::Tensor checkpointed(const Segment& segment, const std::vector<torch::Tensor>& inputs);

// The most one recompute raised the live CPU tensor bytes (device/counting_allocator.h) since
// the last reset: the recomputed segment's saved activations, what backward adds on top of the
// forward's (train/activation_peak.h). Any thread (an atomic).
void reset_recompute_rise();
int64_t max_recompute_rise_bytes();

}  // namespace ddpd::detail
