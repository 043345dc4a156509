// The warp-level primitives the tensor-core kernels (flash_attention_tc.cuh) are built from, as
// inline PTX: mma.sync m16n8k16 (bf16 / fp16 in, fp32 accumulate), ldmatrix x4 (plain and
// transposed), cp.async 16-byte copies with zero fill, and a butterfly shuffle. Every use of a
// warp-wide instruction in the kernels goes through these few functions so that
// tests/cuda/cuda_emulation.h can replace them (DDPD_CUDA_EMULATION) with CPU versions that
// reproduce PTX's fragment layouts lane by lane, and run the same kernel bodies on CPU threads.
//
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16 with floating point type"):
// with g = lane / 4 and t = lane % 4, and each 32-bit register holding two 16-bit elements,
// lower column first,
//   A (16x16, row-major): a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..],
//                         a3 = A[g+8][2t+8..]
//   B (16x8, k x n):      b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]
//   C, D (16x8, fp32):    c0 = C[g][2t], c1 = C[g][2t+1], c2 = C[g+8][2t], c3 = C[g+8][2t+1]
// ldmatrix.x4: lanes 8i..8i+7 give the row addresses of 8x8 matrix i; register i of lane l
// holds row l/4, elements 2(l%4) and 2(l%4)+1 of matrix i (with .trans: column l/4, rows
// 2(l%4) and 2(l%4)+1).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

// `#pragma unroll` for nvcc; nothing for the host compiler (which warns on the pragma).
#ifdef __CUDACC__
#define DDPD_UNROLL _Pragma("unroll")
#else
#define DDPD_UNROLL
#endif

namespace ddpd::kernels::cuda::detail {

#ifndef DDPD_CUDA_EMULATION

template <typename T>
__device__ inline void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);

template <>
__device__ inline void mma_16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ inline void mma_16816<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8x8 b16 matrices from shared memory; `row` is this lane's row address (16 bytes).
template <bool kTrans>
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  const auto at = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  if constexpr (kTrans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(at)
                 : "memory");
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(at)
                 : "memory");
  }
}

// 16 bytes global -> shared, asynchronously; zeros where !valid (no global read then).
__device__ inline void cp_async_16(void* shared, const void* global, bool valid) {
  const auto at = static_cast<uint32_t>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(at), "l"(global),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ inline float shfl_xor(float x, int lane_mask) {
  return __shfl_xor_sync(0xffffffffu, x, lane_mask);
}

#endif  // DDPD_CUDA_EMULATION

}  // namespace ddpd::kernels::cuda::detail
