// FlashAttention-2 on CUDA: tiling, online softmax, causal masking, and a backward that
// recomputes each tile's probabilities from the saved log-sum-exp.
//
// Forward: one block per (query tile of kRows rows, batch-head); each thread owns one query
// row (q, the output accumulator, running max m and denominator l in registers) and the block
// streams key/value tiles of kCols rows through shared memory. Causal tiles past the block's
// last row are skipped; the diagonal tile is masked per element.
// Backward (FA2's parallelisation over keys): one block per (key tile, batch-head); each thread
// owns one key row (k, v and the dk, dv accumulators in registers) and the block streams query
// tiles (q, dO, lse, δ = rowsum(dO∘O)) through shared memory. dQ is accumulated in float32
// with atomics, then converted. All arithmetic is float32; inputs may be bf16.
#include <cuda_bf16.h>

#include <cmath>

#include "ddpd/kernels/flash_attention_cuda.h"
#include "flash_attention_kernels.cuh"

namespace ddpd::kernels::cuda {
namespace {

using namespace detail;

template <typename T, int D>
cudaError_t forward_typed(const void* q, const void* k, const void* v, void* out, float* lse,
                          const AttentionShape& s, cudaStream_t stream) {
  const Geometry g = tile_geometry(s);
  forward_kernel<T, D><<<g.grid, g.threads, 0, stream>>>(
      static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
      static_cast<T*>(out), lse, s.seq, s.causal, 1.f / sqrtf(static_cast<float>(D)));
  return cudaGetLastError();
}

template <typename T, int D>
cudaError_t backward_typed(const void* q, const void* k, const void* v, const void* out,
                           const float* lse, const void* grad_out, void* dq, void* dk, void* dv,
                           void* workspace, const AttentionShape& s, cudaStream_t stream) {
  const size_t rows = static_cast<size_t>(s.batch_heads) * s.seq, n = rows * D;
  float* delta = static_cast<float*>(workspace);
  float* dq_accum = delta + rows;
  cudaError_t status = cudaMemsetAsync(dq_accum, 0, n * sizeof(float), stream);
  if (status != cudaSuccess) return status;
  const Geometry per_row = elementwise_geometry(rows), per_element = elementwise_geometry(n);
  delta_kernel<T, D><<<per_row.grid, per_row.threads, 0, stream>>>(
      static_cast<const T*>(out), static_cast<const T*>(grad_out), delta, static_cast<int>(rows));
  const Geometry tiles = tile_geometry(s);
  backward_kernel<T, D><<<tiles.grid, tiles.threads, 0, stream>>>(
      static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), lse, delta,
      static_cast<const T*>(grad_out), dq_accum, static_cast<T*>(dk), static_cast<T*>(dv), s.seq,
      s.causal, 1.f / sqrtf(static_cast<float>(D)));
  convert_kernel<T>
      <<<per_element.grid, per_element.threads, 0, stream>>>(dq_accum, static_cast<T*>(dq), n);
  return cudaGetLastError();
}

bool valid(const AttentionShape& s) {
  return s.batch_heads > 0 && s.seq > 0 &&
         (s.head_dim == 32 || s.head_dim == 64 || s.head_dim == 128);
}

}  // namespace

size_t backward_workspace_bytes(const AttentionShape& s) {
  return workspace_floats(s) * sizeof(float);
}

#define DDPD_DISPATCH(D_VALUE, CALL_FLOAT, CALL_BF16)         \
  if (shape.head_dim == D_VALUE) {                            \
    return dtype == DType::kFloat32 ? CALL_FLOAT : CALL_BF16; \
  }

cudaError_t flash_attention_forward(const void* q, const void* k, const void* v, void* out,
                                    float* lse, const AttentionShape& shape, DType dtype,
                                    cudaStream_t stream) {
  if (!valid(shape)) return cudaErrorInvalidValue;
  DDPD_DISPATCH(32, (forward_typed<float, 32>(q, k, v, out, lse, shape, stream)),
                (forward_typed<__nv_bfloat16, 32>(q, k, v, out, lse, shape, stream)))
  DDPD_DISPATCH(64, (forward_typed<float, 64>(q, k, v, out, lse, shape, stream)),
                (forward_typed<__nv_bfloat16, 64>(q, k, v, out, lse, shape, stream)))
  DDPD_DISPATCH(128, (forward_typed<float, 128>(q, k, v, out, lse, shape, stream)),
                (forward_typed<__nv_bfloat16, 128>(q, k, v, out, lse, shape, stream)))
  return cudaErrorInvalidValue;
}

cudaError_t flash_attention_backward(const void* q, const void* k, const void* v, const void* out,
                                     const float* lse, const void* grad_out, void* dq, void* dk,
                                     void* dv, void* workspace, const AttentionShape& shape,
                                     DType dtype, cudaStream_t stream) {
  if (!valid(shape)) return cudaErrorInvalidValue;
#define DDPD_BACKWARD(T, D) \
  (backward_typed<T, D>(q, k, v, out, lse, grad_out, dq, dk, dv, workspace, shape, stream))
  DDPD_DISPATCH(32, DDPD_BACKWARD(float, 32), DDPD_BACKWARD(__nv_bfloat16, 32))
  DDPD_DISPATCH(64, DDPD_BACKWARD(float, 64), DDPD_BACKWARD(__nv_bfloat16, 64))
  DDPD_DISPATCH(128, DDPD_BACKWARD(float, 128), DDPD_BACKWARD(__nv_bfloat16, 128))
#undef DDPD_BACKWARD
  return cudaErrorInvalidValue;
}

#undef DDPD_DISPATCH

}  // namespace ddpd::kernels::cuda
