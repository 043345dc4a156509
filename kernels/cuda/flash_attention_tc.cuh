// FlashAttention-2 on tensor cores (bf16 / fp16 in, fp32 accumulate; head dims 64 and 128):
// the kernel bodies as __device__ functions taking their shared memory as a pointer, so that
// flash_attention.cu wraps them in __global__ kernels and the emulated test
// (tests/cuda/flash_attention_emulated_test.cpp) runs the very same bodies on CPU threads.
// Algorithm and choices: see flash_attention.cu's header.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "ddpd/kernels/flash_attention_cuda.h"
#include "mma_primitives.cuh"

namespace ddpd::kernels::cuda::detail {

constexpr int kTcWarps = 4;
constexpr int kTcThreads = kTcWarps * 32;
constexpr int kTcTile = 64;  // rows of every tile: 16 per warp
constexpr float kLog2e = 1.4426950408889634f;

// Query rows per backward dK/dV step: 64 keeps S and dP at 32 registers each; at d = 128 the
// dK and dV accumulators take 128, so 32 query rows keep the kernel below 255 without spills.
template <int D>
constexpr int kBwdQueryRows = D == 128 ? 32 : 64;

template <typename T>
struct ForwardArgs {
  const T *q, *k, *v;
  T* out;
  float* lse;
  int seq;
  bool causal;
  float scale;
};

template <typename T>
struct BackwardArgs {
  const T *q, *k, *v, *grad_out;
  const float *lse, *delta;
  T *dq, *dk, *dv;
  int seq;
  bool causal;
  float scale;
};

// Shared memory per block (bytes): forward Q, K, V tiles; dK/dV K, V and two buffers of
// (Q, dO, lse, δ); dQ Q, dO and two buffers of (K, V).
// The forward's tiles: 128 query rows per block, two 16-row m-tiles per warp, so every K and V
// fragment loaded from shared memory feeds two mma instead of one (ldmatrix traffic, not the
// tensor cores, bounds a 16-row warp). Key tiles of 64 rows at d = 64, 32 at d = 128, where
// the 2 x 16 x 128 output accumulators already take 128 registers.
constexpr int kFwdMTiles = 2;
constexpr int kFwdRows = kTcWarps * 16 * kFwdMTiles;
template <int D>
constexpr int kFwdCols = D == 128 ? 32 : 64;
template <int D>
constexpr size_t forward_smem_bytes() {
  return (kFwdRows + 2 * kFwdCols<D>)*D * 2;
}
template <int D>
constexpr size_t dkdv_smem_bytes() {
  return (2 * kTcTile * D + 4 * kBwdQueryRows<D> * D) * 2 + 4 * kBwdQueryRows<D> * sizeof(float);
}
template <int D>
constexpr size_t dq_smem_bytes() {
  return 6 * kTcTile * D * 2;
}

// The (batch-head, 64-row tile) a block owns. The grid is one-dimensional with a head's tiles
// adjacent, so blocks that run together share that head's K and V in L2 (and no grid dimension
// caps the batch-heads). `heavy_first`: the causal forward and dQ, where tile i does i + 1 key
// tiles of work, start their longest tiles first, leaving the short ones to fill the tail.
inline size_t tc_blocks(const AttentionShape& s, int rows = kTcTile) {
  return static_cast<size_t>(s.batch_heads) * ((s.seq + rows - 1) / rows);
}
inline size_t forward_blocks(const AttentionShape& s) { return tc_blocks(s, kFwdRows); }
struct BlockTile {
  size_t head;
  int tile;
};
__device__ inline BlockTile block_tile(int seq, bool heavy_first, int rows = kTcTile) {
  const unsigned tiles = (static_cast<unsigned>(seq) + rows - 1) / rows;
  const unsigned i = blockIdx.x % tiles;
  return {blockIdx.x / tiles, static_cast<int>(heavy_first ? tiles - 1 - i : i)};
}

// Tiles are [rows][D] 16-bit elements with 16-byte chunks XOR-swizzled by row, so the 8 row
// addresses of one ldmatrix (same column, 8 consecutive rows) fall in 8 different bank groups:
// conflict-free without padding (padding would push the d = 128 forward past 48 KiB).
template <int D>
__device__ inline int swz(int row, int col) {
  constexpr int kMask = D / 8 < 8 ? D / 8 - 1 : 7;
  return row * D + ((((col >> 3) ^ (row & kMask)) << 3) | (col & 7));
}

__device__ inline uint32_t pack2(__nv_bfloat16 lo, __nv_bfloat16 hi) {
  return static_cast<uint32_t>(static_cast<__nv_bfloat16_raw>(lo).x) |
         (static_cast<uint32_t>(static_cast<__nv_bfloat16_raw>(hi).x) << 16);
}
__device__ inline uint32_t pack2(__half lo, __half hi) {
  return static_cast<uint32_t>(static_cast<__half_raw>(lo).x) |
         (static_cast<uint32_t>(static_cast<__half_raw>(hi).x) << 16);
}
__device__ inline __nv_bfloat16 to_t(float x, __nv_bfloat16) { return __float2bfloat16(x); }
__device__ inline __half to_t(float x, __half) { return __float2half(x); }
template <typename T>
__device__ inline uint32_t pack(float lo, float hi) {
  return pack2(to_t(lo, T()), to_t(hi, T()));
}

// rows [row0, row0 + ROWS) of a [seq][D] matrix into a swizzled tile; rows past seq are zeros.
template <typename T, int D, int ROWS>
__device__ inline void load_tile(T* tile, const T* src, int row0, int seq) {
  constexpr int kChunks = D / 8;
  for (int e = threadIdx.x; e < ROWS * kChunks; e += kTcThreads) {
    const int r = e / kChunks, c = (e % kChunks) * 8, row = row0 + r;
    const bool valid = row < seq;
    cp_async_16(tile + swz<D>(r, c), src + static_cast<size_t>(valid ? row : 0) * D + c, valid);
  }
}

// The lane's 16-byte row address for matrix (lane / 8) of an x4 load at (row0, col0):
// `row_step` and `col_step` pick which of the four matrices sit 8 rows / 8 columns along.
template <int D, typename T>
__device__ inline const T* x4_row(const T* tile, int row0, int col0, int row_bit, int col_bit) {
  const int lane = threadIdx.x & 31, m = lane >> 3, r = lane & 7;
  return tile + swz<D>(row0 + ((m >> row_bit) & 1) * 8 + r, col0 + ((m >> col_bit) & 1) * 8);
}

// acc[NT][4] += A · Bᵀ over k = 0..D-1: A is rows m0..m0+15 of a_tile, Bᵀ rows 0..8NT-1 of
// b_tile (both [rows][D]). S = Q Kᵀ, Sᵀ = K Qᵀ, dP = dO Vᵀ, dPᵀ = V dOᵀ.
template <typename T, int D, int NT>
__device__ inline void gemm_abt(float (&acc)[NT][4], const T* a_tile, int m0, const T* b_tile) {
  DDPD_UNROLL
  for (int k0 = 0; k0 < D; k0 += 16) {
    uint32_t a[4];
    ldmatrix_x4<false>(a, x4_row<D>(a_tile, m0, k0, 0, 1));
    DDPD_UNROLL
    for (int j = 0; j < NT; j += 2) {
      uint32_t b[4];  // n-tiles j (b0, b1) and j + 1 (b2, b3)
      ldmatrix_x4<false>(b, x4_row<D>(b_tile, j * 8, k0, 1, 0));
      mma_16816<T>(acc[j], a, b[0], b[1]);
      mma_16816<T>(acc[j + 1], a, b[2], b[3]);
    }
  }
}

// acc[D/8][4] += P · B: P is 16 x 16KT in A fragments (from accumulators), B rows 0..16KT-1
// of b_tile ([rows][D], read transposed). O += P V, dV += Pᵀ dO, dK += dSᵀ Q, dQ += dS K.
template <typename T, int D, int KT>
__device__ inline void gemm_pb(float (&acc)[D / 8][4], const uint32_t (&p)[KT][4],
                               const T* b_tile) {
  DDPD_UNROLL
  for (int kt = 0; kt < KT; ++kt) {
    DDPD_UNROLL
    for (int j = 0; j < D / 8; j += 2) {
      uint32_t b[4];
      ldmatrix_x4<true>(b, x4_row<D>(b_tile, kt * 16, j * 8, 0, 1));
      mma_16816<T>(acc[j], p[kt], b[0], b[1]);
      mma_16816<T>(acc[j + 1], p[kt], b[2], b[3]);
    }
  }
}

// gemm_abt for MT m-tiles per warp (rows m0 + 16mt): each B fragment feeds MT mma.
template <typename T, int D, int MT, int NT>
__device__ inline void gemm_abt_m(float (&acc)[MT][NT][4], const T* a_tile, int m0,
                                  const T* b_tile) {
  DDPD_UNROLL
  for (int k0 = 0; k0 < D; k0 += 16) {
    uint32_t a[MT][4];
    DDPD_UNROLL
    for (int mt = 0; mt < MT; ++mt)
      ldmatrix_x4<false>(a[mt], x4_row<D>(a_tile, m0 + mt * 16, k0, 0, 1));
    DDPD_UNROLL
    for (int j = 0; j < NT; j += 2) {
      uint32_t b[4];
      ldmatrix_x4<false>(b, x4_row<D>(b_tile, j * 8, k0, 1, 0));
      DDPD_UNROLL
      for (int mt = 0; mt < MT; ++mt) {
        mma_16816<T>(acc[mt][j], a[mt], b[0], b[1]);
        mma_16816<T>(acc[mt][j + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

// gemm_pb for MT m-tiles per warp: each B fragment feeds MT mma.
template <typename T, int D, int MT, int KT>
__device__ inline void gemm_pb_m(float (&acc)[MT][D / 8][4], const uint32_t (&p)[MT][KT][4],
                                 const T* b_tile) {
  DDPD_UNROLL
  for (int kt = 0; kt < KT; ++kt) {
    DDPD_UNROLL
    for (int j = 0; j < D / 8; j += 2) {
      uint32_t b[4];
      ldmatrix_x4<true>(b, x4_row<D>(b_tile, kt * 16, j * 8, 0, 1));
      DDPD_UNROLL
      for (int mt = 0; mt < MT; ++mt) {
        mma_16816<T>(acc[mt][j], p[mt][kt], b[0], b[1]);
        mma_16816<T>(acc[mt][j + 1], p[mt][kt], b[2], b[3]);
      }
    }
  }
}

// Accumulators of a 16 x 8NT product as A fragments of the next product (no data movement:
// the C layout of n-tiles 2k and 2k+1 is the A layout of k-step k).
template <typename T, int NT>
__device__ inline void to_a(uint32_t (&a)[NT / 2][4], const float (&s)[NT][4]) {
  DDPD_UNROLL
  for (int k = 0; k < NT / 2; ++k) {
    a[k][0] = pack<T>(s[2 * k][0], s[2 * k][1]);
    a[k][1] = pack<T>(s[2 * k][2], s[2 * k][3]);
    a[k][2] = pack<T>(s[2 * k + 1][0], s[2 * k + 1][1]);
    a[k][3] = pack<T>(s[2 * k + 1][2], s[2 * k + 1][3]);
  }
}

// Sets s to -inf where masked(row, col): this lane's rows are row0 and row0 + 8, its columns
// col0 + 8j and col0 + 8j + 1 (row0 = tile row + g, col0 = tile column + 2t).
template <int NT, typename Masked>
__device__ inline void mask_scores(float (&s)[NT][4], int row0, int col0, Masked masked) {
  DDPD_UNROLL
  for (int j = 0; j < NT; ++j) {
    DDPD_UNROLL
    for (int e = 0; e < 4; ++e) {
      if (masked(row0 + (e >> 1) * 8, col0 + j * 8 + (e & 1))) s[j][e] = -INFINITY;
    }
  }
}

__device__ inline float quad_max(float x) {
  x = fmaxf(x, shfl_xor(x, 1));
  return fmaxf(x, shfl_xor(x, 2));
}
__device__ inline float quad_sum(float x) {
  x += shfl_xor(x, 1);
  return x + shfl_xor(x, 2);
}

// FA2's online softmax over one 16 x 8NT score tile: per row (this lane's half h = 0, 1) the
// running max m (raw scores) and this lane's partial denominator l; rescales O, turns s into P.
template <int D, int NT>
__device__ inline void online_softmax(float (&s)[NT][4], float (&m)[2], float (&l)[2],
                                      float (&o)[D / 8][4], float scale_log2) {
  DDPD_UNROLL
  for (int h = 0; h < 2; ++h) {
    float tile_max = -INFINITY;
    DDPD_UNROLL
    for (int j = 0; j < NT; ++j) tile_max = fmaxf(tile_max, fmaxf(s[j][2 * h], s[j][2 * h + 1]));
    const float m_new = fmaxf(m[h], quad_max(tile_max));
    // A row with every key masked so far keeps m = -inf; subtract 0 instead (P = 0, no NaN).
    const float shift = m_new == -INFINITY ? 0.f : m_new * scale_log2;
    const float correction = exp2f(m[h] * scale_log2 - shift);
    m[h] = m_new;
    l[h] *= correction;
    DDPD_UNROLL
    for (int j = 0; j < D / 8; ++j) {
      o[j][2 * h] *= correction;
      o[j][2 * h + 1] *= correction;
    }
    DDPD_UNROLL
    for (int j = 0; j < NT; ++j) {
      DDPD_UNROLL
      for (int e = 2 * h; e < 2 * h + 2; ++e) {
        s[j][e] = exp2f(s[j][e] * scale_log2 - shift);
        l[h] += s[j][e];
      }
    }
  }
}

// O / l to `out` (16-bit pairs) and lse = m·scale + ln l, for this lane's rows that exist.
template <typename T, int D>
__device__ inline void forward_epilogue(const ForwardArgs<T>& a, float (&o)[D / 8][4],
                                        const float (&m)[2], const float (&l)[2], size_t head,
                                        int row0) {
  const size_t base = head * a.seq;
  const int t = threadIdx.x & 3;
  DDPD_UNROLL
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + h * 8;
    const float sum = quad_sum(l[h]);
    if (row >= a.seq) continue;
    const float inv = 1.f / sum;
    auto* dst = reinterpret_cast<uint32_t*>(a.out + (base + row) * D);
    DDPD_UNROLL
    for (int j = 0; j < D / 8; ++j)
      dst[j * 4 + t] = pack<T>(o[j][2 * h] * inv, o[j][2 * h + 1] * inv);
    if (t == 0) a.lse[base + row] = m[h] * a.scale + logf(sum);
  }
}

// Masks, then runs the online softmax on, one key tile's scores (MT m-tiles), and returns P as
// A fragments.
template <typename T, int D, int MT, int NT>
__device__ inline void softmax_tile(const ForwardArgs<T>& a, float (&s)[MT][NT][4],
                                    float (&m)[MT][2], float (&l)[MT][2], float (&o)[MT][D / 8][4],
                                    uint32_t (&p)[MT][NT / 2][4], int q0, int row0, int k0) {
  const int seq = a.seq;
  const bool causal = a.causal;
  // Only the tail tile and tiles reaching past the block's first query need a mask.
  const bool masked = k0 + 8 * NT > seq || (causal && k0 + 8 * NT - 1 > q0);
  DDPD_UNROLL
  for (int mt = 0; mt < MT; ++mt) {
    if (masked) {
      mask_scores(s[mt], row0 + mt * 16, k0 + 2 * (threadIdx.x & 3),
                  [seq, causal](int r, int c) { return c >= seq || (causal && c > r); });
    }
    online_softmax<D, NT>(s[mt], m[mt], l[mt], o[mt], a.scale * kLog2e);
    to_a<T, NT>(p[mt], s[mt]);
  }
}

// Forward: block per (batch-head, 128-query tile), warp w owns query rows 32w..32w+31 (two
// m-tiles). K[j] and V[j] share the pipeline FA2 uses: V[j] is copied while S = Q K[j]ᵀ is
// computed, K[j+1] while softmax and O += P V[j] run.
template <typename T, int D>
__device__ void forward_tc(const ForwardArgs<T>& a, char* smem) {
  constexpr int MT = kFwdMTiles, BR = kFwdRows, BC = kFwdCols<D>, NT = BC / 8;
  T* q_s = reinterpret_cast<T*>(smem);
  T* k_s = q_s + BR * D;
  T* v_s = k_s + BC * D;
  const BlockTile block = block_tile(a.seq, a.causal, BR);
  const size_t base = block.head * a.seq * D;
  const int q0 = block.tile * BR, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int row0 = q0 + warp * 16 * MT + (lane >> 2);  // m-tile mt: row0 + 16 mt (+ 8)
  const int last_key = a.causal ? min(a.seq, q0 + BR) : a.seq;
  const int tiles = (last_key + BC - 1) / BC;
  load_tile<T, D, BR>(q_s, a.q + base, q0, a.seq);
  load_tile<T, D, BC>(k_s, a.k + base, 0, a.seq);
  cp_async_commit();
  float o[MT][D / 8][4] = {}, m[MT][2], l[MT][2] = {};
  DDPD_UNROLL
  for (int mt = 0; mt < MT; ++mt) m[mt][0] = m[mt][1] = -INFINITY;
  cp_async_wait<0>();
  __syncthreads();
  for (int j = 0; j < tiles; ++j) {
    const int k0 = j * BC;
    load_tile<T, D, BC>(v_s, a.v + base, k0, a.seq);
    cp_async_commit();
    float s[MT][NT][4] = {};
    gemm_abt_m<T, D, MT, NT>(s, q_s, warp * 16 * MT, k_s);
    __syncthreads();  // every warp is done with K[j]
    if (j + 1 < tiles) load_tile<T, D, BC>(k_s, a.k + base, k0 + BC, a.seq);
    cp_async_commit();  // possibly empty: keeps the group count uniform
    uint32_t p[MT][NT / 2][4];
    softmax_tile<T, D, MT, NT>(a, s, m, l, o, p, q0, row0, k0);
    cp_async_wait<1>();  // V[j] has landed (K[j+1] may still be in flight)
    __syncthreads();
    gemm_pb_m<T, D, MT, NT / 2>(o, p, v_s);
    cp_async_wait<0>();
    __syncthreads();  // K[j+1] visible; every warp is done with V[j]
  }
  DDPD_UNROLL
  for (int mt = 0; mt < MT; ++mt) {
    forward_epilogue<T, D>(a, o[mt], m[mt], l[mt], block.head, row0 + mt * 16);
  }
}

// Q, dO, lse and δ of query tile `i` (QR rows) into buffer `buf` of the dK/dV kernel. Past-the-
// end queries get lse = +inf (P = 0) and δ = 0.
template <typename T, int D, int QR>
__device__ inline void load_query_tile(const BackwardArgs<T>& a, T* q_s, T* do_s, float* lse_s,
                                       float* delta_s, size_t head, int q0) {
  const size_t base = head * a.seq;
  load_tile<T, D, QR>(q_s, a.q + base * D, q0, a.seq);
  load_tile<T, D, QR>(do_s, a.grad_out + base * D, q0, a.seq);
  for (int r = threadIdx.x; r < QR; r += kTcThreads) {
    const bool valid = q0 + r < a.seq;
    lse_s[r] = valid ? a.lse[base + q0 + r] * kLog2e : INFINITY;
    delta_s[r] = valid ? a.delta[base + q0 + r] : 0.f;
  }
}

// Stores this lane's rows of a 16 x D accumulator times `scale` (rows row0, row0 + 8).
template <typename T, int D>
__device__ inline void store_rows(T* dst, float (&acc)[D / 8][4], int row0, int seq, float scale) {
  const int t = threadIdx.x & 3;
  DDPD_UNROLL
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + h * 8;
    if (row >= seq) continue;
    auto* out = reinterpret_cast<uint32_t*>(dst + static_cast<size_t>(row) * D);
    DDPD_UNROLL
    for (int j = 0; j < D / 8; ++j) {
      out[j * 4 + t] = pack<T>(acc[j][2 * h] * scale, acc[j][2 * h + 1] * scale);
    }
  }
}

// One query tile of the dK/dV kernel: Sᵀ and dPᵀ for this warp's 16 keys, then
// Pᵀ = exp(Sᵀ·scale − lse), dSᵀ = Pᵀ ∘ (dPᵀ − δ), dV += Pᵀ dO, dK += dSᵀ Q.
template <typename T, int D, int QR>
__device__ inline void dkdv_step(const BackwardArgs<T>& a, const T* k_s, const T* v_s, const T* q_s,
                                 const T* do_s, const float* lse_s, const float* delta_s, int key0,
                                 int q0, float (&dk)[D / 8][4], float (&dv)[D / 8][4]) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, t = lane & 3;
  float s[QR / 8][4] = {}, dp[QR / 8][4] = {};
  gemm_abt<T, D, QR / 8>(s, k_s, warp * 16, q_s);
  gemm_abt<T, D, QR / 8>(dp, v_s, warp * 16, do_s);
  if (a.causal && q0 < key0 + kTcTile - 1) {  // queries before keys see none of them
    mask_scores(s, key0 + warp * 16 + (lane >> 2), q0 + 2 * t,
                [](int key, int query) { return key > query; });
  }
  const float scale_log2 = a.scale * kLog2e;
  DDPD_UNROLL
  for (int j = 0; j < QR / 8; ++j) {
    DDPD_UNROLL
    for (int e = 0; e < 4; ++e) {
      const int col = j * 8 + 2 * t + (e & 1);
      s[j][e] = exp2f(s[j][e] * scale_log2 - lse_s[col]);
      dp[j][e] = s[j][e] * (dp[j][e] - delta_s[col]);
    }
  }
  uint32_t frag[QR / 16][4];
  to_a<T, QR / 8>(frag, s);
  gemm_pb<T, D, QR / 16>(dv, frag, do_s);
  to_a<T, QR / 8>(frag, dp);
  gemm_pb<T, D, QR / 16>(dk, frag, q_s);
}

// dK, dV: block per (batch-head, 64-key tile), warp w owns keys 16w..16w+15 (K, V stay in
// shared memory); query tiles of QR rows stream through two buffers, the next one copied while
// this one is used. Causal: query tiles that end before the first key are skipped.
template <typename T, int D>
__device__ void backward_dkdv_tc(const BackwardArgs<T>& a, char* smem) {
  constexpr int QR = kBwdQueryRows<D>;
  T* k_s = reinterpret_cast<T*>(smem);
  T* v_s = k_s + kTcTile * D;
  T* q_s = v_s + kTcTile * D;                                  // [2][QR][D]
  T* do_s = q_s + 2 * QR * D;                                  // [2][QR][D]
  float* lse_s = reinterpret_cast<float*>(do_s + 2 * QR * D);  // [2][QR]
  float* delta_s = lse_s + 2 * QR;                             // [2][QR]
  // Causal: key tile 0 has the most work (every query) and already runs first.
  const BlockTile block = block_tile(a.seq, false);
  const size_t base = block.head * a.seq * D;
  const int key0 = block.tile * kTcTile, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int first = a.causal ? key0 / QR : 0, last = (a.seq + QR - 1) / QR;
  load_tile<T, D, kTcTile>(k_s, a.k + base, key0, a.seq);
  load_tile<T, D, kTcTile>(v_s, a.v + base, key0, a.seq);
  load_query_tile<T, D, QR>(a, q_s, do_s, lse_s, delta_s, block.head, first * QR);
  cp_async_commit();
  float dk[D / 8][4] = {}, dv[D / 8][4] = {};
  for (int i = first; i < last; ++i) {
    const int buf = (i - first) & 1, next = buf ^ 1;
    cp_async_wait<0>();
    __syncthreads();  // tile i visible; every warp is done with the other buffer
    if (i + 1 < last) {
      load_query_tile<T, D, QR>(a, q_s + next * QR * D, do_s + next * QR * D, lse_s + next * QR,
                                delta_s + next * QR, block.head, (i + 1) * QR);
    }
    cp_async_commit();
    dkdv_step<T, D, QR>(a, k_s, v_s, q_s + buf * QR * D, do_s + buf * QR * D, lse_s + buf * QR,
                        delta_s + buf * QR, key0, i * QR, dk, dv);
  }
  const int row0 = key0 + warp * 16 + (lane >> 2);
  store_rows<T, D>(a.dk + base, dk, row0, a.seq, a.scale);
  store_rows<T, D>(a.dv + base, dv, row0, a.seq, 1.f);
}

// One key tile of the dQ kernel: S = Q Kᵀ, dP = dO Vᵀ for this warp's 16 queries, then
// dS = P ∘ (dP − δ), dQ += dS K.
template <typename T, int D>
__device__ inline void dq_step(const BackwardArgs<T>& a, const T* q_s, const T* do_s, const T* k_s,
                               const T* v_s, int q0, int row0, int k0, const float (&lse)[2],
                               const float (&delta)[2], float (&dq)[D / 8][4]) {
  const int warp = threadIdx.x >> 5, t = threadIdx.x & 3;
  float s[kTcTile / 8][4] = {}, dp[kTcTile / 8][4] = {};
  gemm_abt<T, D, kTcTile / 8>(s, q_s, warp * 16, k_s);
  gemm_abt<T, D, kTcTile / 8>(dp, do_s, warp * 16, v_s);
  if (k0 + kTcTile > a.seq || (a.causal && k0 + kTcTile > q0 + 1)) {
    const int seq = a.seq;
    const bool causal = a.causal;
    mask_scores(s, row0, k0 + 2 * t,
                [seq, causal](int r, int c) { return c >= seq || (causal && c > r); });
  }
  const float scale_log2 = a.scale * kLog2e;
  DDPD_UNROLL
  for (int j = 0; j < kTcTile / 8; ++j) {
    DDPD_UNROLL
    for (int e = 0; e < 4; ++e) {
      const float p = exp2f(s[j][e] * scale_log2 - lse[e >> 1]);
      dp[j][e] = p * (dp[j][e] - delta[e >> 1]);
    }
  }
  uint32_t frag[kTcTile / 16][4];
  to_a<T, kTcTile / 8>(frag, dp);
  gemm_pb<T, D, kTcTile / 16>(dq, frag, k_s);
}

// dQ: block per (batch-head, 64-query tile), warp w owns queries 16w..16w+15; key/value tiles
// stream through two buffers. A separate kernel (not atomics from the dK/dV kernel): every dQ
// element has one writer, so dQ is deterministic and needs no float32 scratch or zeroing, at
// the cost of recomputing S and dP (7 tile products per tile pair instead of 5).
template <typename T, int D>
__device__ void backward_dq_tc(const BackwardArgs<T>& a, char* smem) {
  T* q_s = reinterpret_cast<T*>(smem);
  T* do_s = q_s + kTcTile * D;
  T* k_s = do_s + kTcTile * D;     // [2][64][D]
  T* v_s = k_s + 2 * kTcTile * D;  // [2][64][D]
  const BlockTile block = block_tile(a.seq, a.causal);
  const size_t base = block.head * a.seq;
  const int q0 = block.tile * kTcTile, lane = threadIdx.x & 31;
  const int row0 = q0 + (threadIdx.x >> 5) * 16 + (lane >> 2);
  const int all_tiles = (a.seq + kTcTile - 1) / kTcTile;
  const int tiles = a.causal ? min(all_tiles, block.tile + 1) : all_tiles;
  load_tile<T, D, kTcTile>(q_s, a.q + base * D, q0, a.seq);
  load_tile<T, D, kTcTile>(do_s, a.grad_out + base * D, q0, a.seq);
  load_tile<T, D, kTcTile>(k_s, a.k + base * D, 0, a.seq);
  load_tile<T, D, kTcTile>(v_s, a.v + base * D, 0, a.seq);
  cp_async_commit();
  float lse[2], delta[2], dq[D / 8][4] = {};
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + h * 8;
    lse[h] = row < a.seq ? a.lse[base + row] * kLog2e : 0.f;
    delta[h] = row < a.seq ? a.delta[base + row] : 0.f;
  }
  for (int j = 0; j < tiles; ++j) {
    const int buf = j & 1, next = buf ^ 1;
    cp_async_wait<0>();
    __syncthreads();  // tile j visible; every warp is done with the other buffer
    if (j + 1 < tiles) {
      load_tile<T, D, kTcTile>(k_s + next * kTcTile * D, a.k + base * D, (j + 1) * kTcTile, a.seq);
      load_tile<T, D, kTcTile>(v_s + next * kTcTile * D, a.v + base * D, (j + 1) * kTcTile, a.seq);
    }
    cp_async_commit();
    dq_step<T, D>(a, q_s, do_s, k_s + buf * kTcTile * D, v_s + buf * kTcTile * D, q0, row0,
                  j * kTcTile, lse, delta, dq);
  }
  store_rows<T, D>(a.dq + base * D, dq, row0, a.seq, a.scale);
}

}  // namespace ddpd::kernels::cuda::detail
