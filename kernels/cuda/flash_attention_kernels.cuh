// FlashAttention-2's CUDA kernels (see flash_attention.cu for the algorithm) and their launch
// geometry: device code only, included by flash_attention.cu, and by the emulated test
// (tests/cuda/flash_attention_emulated_test.cpp), which runs these same kernel bodies on CPU
// threads where no GPU is present.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <vector_types.h>

#include <cmath>
#include <cstddef>

#include "ddpd/kernels/flash_attention_cuda.h"

namespace ddpd::kernels::cuda::detail {

constexpr int kRows = 64;  // query rows per forward block (one per thread)
constexpr int kCols = 32;  // key rows per shared-memory tile

// size_t indices: [batch_heads, seq, head_dim] offsets may exceed INT_MAX.
__device__ inline float load(const float* p, size_t i) { return p[i]; }
__device__ inline float load(const __nv_bfloat16* p, size_t i) { return __bfloat162float(p[i]); }
__device__ inline void store(float* p, size_t i, float x) { p[i] = x; }
__device__ inline void store(__nv_bfloat16* p, size_t i, float x) { p[i] = __float2bfloat16(x); }
__device__ inline float load(const __half* p, size_t i) { return __half2float(p[i]); }
__device__ inline void store(__half* p, size_t i, float x) { p[i] = __float2half(x); }

template <typename T, int D>
__global__ void forward_kernel(const T* __restrict__ q, const T* __restrict__ k,
                               const T* __restrict__ v, T* __restrict__ out,
                               float* __restrict__ lse, int seq, bool causal, float scale) {
  __shared__ float k_tile[kCols][D];
  __shared__ float v_tile[kCols][D];
  // Grid: x = batch-head (gridDim.y is capped at 65535), y = query tile.
  const size_t base = static_cast<size_t>(blockIdx.x) * seq * D;
  const int row = blockIdx.y * kRows + threadIdx.x;
  const bool active = row < seq;
  float q_row[D], acc[D];
  for (int c = 0; c < D; ++c) {
    q_row[c] = active ? load(q, base + static_cast<size_t>(row) * D + c) * scale : 0.f;
    acc[c] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  const int tile_end = causal ? min(seq, static_cast<int>(blockIdx.y + 1) * kRows) : seq;
  for (int j0 = 0; j0 < tile_end; j0 += kCols) {
    __syncthreads();  // the previous tile is no longer read
    for (int e = threadIdx.x; e < kCols * D; e += blockDim.x) {
      const int r = e / D, c = e % D, j = j0 + r;
      const size_t at = base + static_cast<size_t>(j) * D + c;
      k_tile[r][c] = j < seq ? load(k, at) : 0.f;
      v_tile[r][c] = j < seq ? load(v, at) : 0.f;
    }
    __syncthreads();
    if (!active) continue;
    for (int r = 0; r < kCols; ++r) {
      const int j = j0 + r;
      if (j >= seq || (causal && j > row)) break;
      float s = 0.f;
      for (int c = 0; c < D; ++c) s += q_row[c] * k_tile[r][c];
      const float m_new = fmaxf(m, s);
      const float correction = __expf(m - m_new);  // 0 on the first key (m = -inf)
      const float p = __expf(s - m_new);
      l = l * correction + p;
      for (int c = 0; c < D; ++c) acc[c] = acc[c] * correction + p * v_tile[r][c];
      m = m_new;
    }
  }
  if (!active) return;
  for (int c = 0; c < D; ++c) store(out, base + static_cast<size_t>(row) * D + c, acc[c] / l);
  lse[static_cast<size_t>(blockIdx.x) * seq + row] = m + logf(l);
}

// δ_i = Σ_c dO_ic O_ic, one thread per query row.
template <typename T, int D>
__global__ void delta_kernel(const T* __restrict__ out, const T* __restrict__ grad_out,
                             float* __restrict__ delta, int rows_total) {
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= rows_total) return;
  float sum = 0.f;
  for (int c = 0; c < D; ++c) {
    const size_t at = static_cast<size_t>(row) * D + c;
    sum += load(out, at) * load(grad_out, at);
  }
  delta[row] = sum;
}

template <typename T, int D>
__global__ void backward_kernel(const T* __restrict__ q, const T* __restrict__ k,
                                const T* __restrict__ v, const float* __restrict__ lse,
                                const float* __restrict__ delta, const T* __restrict__ grad_out,
                                float* __restrict__ dq_accum, T* __restrict__ dk,
                                T* __restrict__ dv, int seq, bool causal, float scale) {
  __shared__ float q_tile[kCols][D];
  __shared__ float do_tile[kCols][D];
  __shared__ float lse_tile[kCols];
  __shared__ float delta_tile[kCols];
  // Grid: x = batch-head (gridDim.y is capped at 65535), y = key tile.
  const size_t base = static_cast<size_t>(blockIdx.x) * seq * D;
  const size_t row_base = static_cast<size_t>(blockIdx.x) * seq;
  const int key = blockIdx.y * kRows + threadIdx.x;
  const bool active = key < seq;
  float k_row[D], v_row[D], dk_acc[D], dv_acc[D];
  for (int c = 0; c < D; ++c) {
    const size_t at = base + static_cast<size_t>(key) * D + c;
    k_row[c] = active ? load(k, at) : 0.f;
    v_row[c] = active ? load(v, at) : 0.f;
    dk_acc[c] = dv_acc[c] = 0.f;
  }
  // Causal: queries before this block's first key see none of its keys.
  const int first_query = causal ? static_cast<int>(blockIdx.y) * kRows : 0;
  for (int i0 = first_query; i0 < seq; i0 += kCols) {
    __syncthreads();
    for (int e = threadIdx.x; e < kCols * D; e += blockDim.x) {
      const int r = e / D, c = e % D, i = i0 + r;
      const size_t at = base + static_cast<size_t>(i) * D + c;
      q_tile[r][c] = i < seq ? load(q, at) : 0.f;
      do_tile[r][c] = i < seq ? load(grad_out, at) : 0.f;
    }
    for (int r = threadIdx.x; r < kCols; r += blockDim.x) {
      const int i = i0 + r;
      lse_tile[r] = i < seq ? lse[row_base + i] : 0.f;
      delta_tile[r] = i < seq ? delta[row_base + i] : 0.f;
    }
    __syncthreads();
    if (!active) continue;
    for (int r = 0; r < kCols; ++r) {
      const int i = i0 + r;
      if (i >= seq) break;
      if (causal && key > i) continue;
      float s = 0.f, dp = 0.f;
      for (int c = 0; c < D; ++c) {
        s += q_tile[r][c] * k_row[c];
        dp += do_tile[r][c] * v_row[c];
      }
      const float p = __expf(s * scale - lse_tile[r]);
      const float ds = p * (dp - delta_tile[r]);
      float* dq_row = dq_accum + base + static_cast<size_t>(i) * D;
      for (int c = 0; c < D; ++c) {
        dv_acc[c] += p * do_tile[r][c];
        dk_acc[c] += ds * q_tile[r][c] * scale;
        atomicAdd(dq_row + c, ds * k_row[c] * scale);
      }
    }
  }
  if (!active) return;
  for (int c = 0; c < D; ++c) {
    const size_t at = base + static_cast<size_t>(key) * D + c;
    store(dk, at, dk_acc[c]);
    store(dv, at, dv_acc[c]);
  }
}

template <typename T>
__global__ void convert_kernel(const float* __restrict__ from, T* __restrict__ to, size_t n) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) store(to, i, from[i]);
}

// Launch geometry, shared by the launches and the emulated test. Grids put batch-heads on x
// (gridDim.y is capped at 65535) and 64-row tiles on y; element-wise kernels use 256 threads.
struct Geometry {
  dim3 grid;
  unsigned threads;
};
inline Geometry tile_geometry(const AttentionShape& s) {
  return {dim3(static_cast<unsigned>(s.batch_heads),
               static_cast<unsigned>((s.seq + kRows - 1) / kRows)),
          kRows};
}
// Backward's float32 workspace: δ (one per query row), then dQ's accumulator.
inline size_t workspace_floats(const AttentionShape& s) {
  const size_t rows = static_cast<size_t>(s.batch_heads) * s.seq;
  return rows + rows * s.head_dim;
}
inline Geometry elementwise_geometry(size_t n) {
  return {dim3(static_cast<unsigned>((n + 255) / 256)), 256};
}

}  // namespace ddpd::kernels::cuda::detail
