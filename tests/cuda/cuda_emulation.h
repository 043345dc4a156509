// Runs CUDA kernel bodies on CPU threads, for testing kernels where no GPU is present: each
// block's threads are real std::threads, __syncthreads() a real barrier, __shared__ arrays
// statics that a block's threads share (blocks run one after another), atomicAdd an atomic
// read-modify-write. What this checks: index arithmetic, bounds, masking, barriers placed so
// that no thread reads a tile another is rewriting (ThreadSanitizer can watch it), and the
// numerics in float32. What it cannot check: warp-level behaviour (the kernels use none),
// occupancy, or speed.
//
// Include this, then the .cuh with the kernels; launch with emulate_launch().
#pragma once

// CUDA's own headers first, as CUDA wrote them; the macros below must not reach them.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <vector_types.h>

#include <atomic>
#include <barrier>
#include <cmath>
#include <thread>
#include <vector>

// CUDA's qualifiers, as plain C++ (cuda_bf16.h's host side stays as CUDA's headers made it).
#undef __global__
#undef __device__
#undef __shared__
#define __global__
#define __device__
#define __shared__ static
#ifndef __restrict__
#define __restrict__
#endif

namespace ddpd::testing::emulation {
inline thread_local uint3 thread_index;
inline thread_local uint3 block_index;
inline dim3 block_dim, grid_dim;
inline std::barrier<>* block_barrier = nullptr;
}  // namespace ddpd::testing::emulation

#define threadIdx (::ddpd::testing::emulation::thread_index)
#define blockIdx (::ddpd::testing::emulation::block_index)
#define blockDim (::ddpd::testing::emulation::block_dim)
#define gridDim (::ddpd::testing::emulation::grid_dim)

inline void __syncthreads() { ddpd::testing::emulation::block_barrier->arrive_and_wait(); }
inline float __expf(float x) { return std::exp(x); }
inline int min(int a, int b) { return a < b ? a : b; }
inline float atomicAdd(float* address, float value) {
  return std::atomic_ref<float>(*address).fetch_add(value);
}

namespace ddpd::testing::emulation {

// Runs `kernel()` as a grid of `grid` blocks of `threads` threads, block after block.
template <typename Kernel>
void emulate_launch(dim3 grid, unsigned threads, Kernel kernel) {
  block_dim = dim3(threads);
  grid_dim = grid;
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) {
        std::barrier<> barrier(threads);
        block_barrier = &barrier;
        std::vector<std::thread> block;
        block.reserve(threads);
        for (unsigned t = 0; t < threads; ++t) {
          block.emplace_back([&, t] {
            thread_index = make_uint3(t, 0, 0);
            block_index = make_uint3(x, y, z);
            kernel();
          });
        }
        for (auto& thread : block) thread.join();
      }
    }
  }
}

}  // namespace ddpd::testing::emulation
