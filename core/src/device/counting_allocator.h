// Live CPU tensor bytes, counted where LibTorch allocates them: a c10::Allocator that wraps the
// CPU allocator installed before it and counts every allocation's bytes until its deleter runs.
// What the result's memory.step_peak_tensor_bytes reports (docs/metrics.md#memory) and what
// `ddpctl plan memory` predicts (docs/planning.md): weights, gradients, optimizer state,
// activations and the tensors collectives allocate, all of them, unlike peak RSS, which also
// counts the allocator's free lists, the code and the shared-memory segments.
//
// Thread contract: allocations and frees come from any thread (the trainer's, autograd's and
// intra-op threads, Gloo's and the shm transport's workers); the counters are atomics updated
// with relaxed order (no other memory is published through them), and the peak is a CAS-max.
// reset_peak() and the reads may run on any thread too; a reset concurrent with allocations
// starts the window at some value of live bytes in between, which is all a step boundary needs.
#pragma once

#include <cstdint>

namespace ddpd::detail {

// Installs the counting allocator over the CPU allocator installed now (c10::GetCPUAllocator()),
// with c10::SetCPUAllocator at a priority above the default's, once per process (later calls do
// nothing). Tensors allocated before it are freed by their own deleters and never counted.
void install_counting_cpu_allocator();

// Bytes of CPU tensors allocated through it and not yet freed (0 before install).
int64_t live_cpu_tensor_bytes();
// The highest live_cpu_tensor_bytes() since the last reset_peak() (or the install).
int64_t peak_cpu_tensor_bytes();
// Starts a new window: the peak becomes the bytes live now.
void reset_cpu_tensor_peak();

}  // namespace ddpd::detail
