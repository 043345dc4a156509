// FlashAttention-2 on CUDA: tiling, online softmax, causal masking, and a backward that
// recomputes each tile's probabilities from the saved log-sum-exp.
//
// Two implementations, picked per call:
// - Tensor cores (flash_attention_tc.cuh; bf16 and fp16, head dims 64 and 128, 16-byte aligned
//   buffers): FA2 as FA2 does it. mma.sync m16n8k16 (fp32 accumulate) fed by ldmatrix from
//   XOR-swizzled shared tiles that cp.async fills; 4 warps per block. Forward: block per
//   (128-query tile, batch-head), two 16-row m-tiles per warp (each K/V fragment feeds two
//   mma); S = Q Kᵀ in registers, online softmax per row (running max and partial sum in
//   registers, rows reduced across the 4 lanes that share them), P reused from the
//   accumulators as the A operand of O += P V; V[j] copied during Q K[j]ᵀ, K[j+1] during
//   softmax and P V[j]; the log-sum-exp saved. Backward (16 rows per warp, 64-row tiles):
//   δ = rowsum(dO∘O) first; a dK/dV kernel per 64-key tile that streams query tiles through
//   two shared buffers (P recomputed from lse); and a separate dQ kernel per 64-query tile
//   that streams key tiles. dQ has one writer per element (deterministic, no float32 scratch),
//   paid for by recomputing S and dP there; atomics from the dK/dV kernel would save that work
//   but make dQ depend on the order blocks finish.
// - Scalar (flash_attention_kernels.cuh): float32 at every head dim, and 16-bit inputs at head
//   dim 32 or on unaligned buffers. A thread per row, float32 FMA, dQ by float32 atomics.
//
// Why inline PTX rather than CuTe/CUTLASS: the kernels need five instructions (mma, ldmatrix,
// ldmatrix.trans, cp.async, shuffle), which mma_primitives.cuh wraps in ~60 lines with no new
// dependency (CUTLASS would add the nvidia-cutlass headers to every CUDA build) and, above all,
// with a CPU twin in tests/cuda/cuda_emulation.h: the emulated test runs these very kernel
// bodies against a double-precision reference without a GPU. CuTe's layouts and copy atoms
// could not be emulated that way. The price: fragment layouts are hand-written (documented in
// mma_primitives.cuh, checked by the emulation), and Hopper's wgmma/TMA are not used.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "ddpd/kernels/flash_attention_cuda.h"
#include "flash_attention_kernels.cuh"
#include "flash_attention_tc.cuh"

namespace ddpd::kernels::cuda {
namespace {

using namespace detail;

// Blocks per SM each kernel is compiled for (ptxas caps registers at 65536 / (128 · blocks)):
// 2, i.e. up to 255 registers. With no minimum ptxas picks a cap of its own and spilled the
// d = 64 dQ kernel at 168; with 3 the two-m-tile forward spilled 400 bytes at 168.
constexpr int kForwardBlocks = 2;
constexpr int kBackwardBlocks = 2;

template <typename T, int D>
__global__ void __launch_bounds__(kTcThreads, kForwardBlocks)
    forward_tc_kernel(ForwardArgs<T> args) {
  extern __shared__ __align__(16) char smem[];
  forward_tc<T, D>(args, smem);
}
template <typename T, int D>
__global__ void __launch_bounds__(kTcThreads, kBackwardBlocks)
    backward_dkdv_tc_kernel(BackwardArgs<T> args) {
  extern __shared__ __align__(16) char smem[];
  backward_dkdv_tc<T, D>(args, smem);
}
template <typename T, int D>
__global__ void __launch_bounds__(kTcThreads, kBackwardBlocks)
    backward_dq_tc_kernel(BackwardArgs<T> args) {
  extern __shared__ __align__(16) char smem[];
  backward_dq_tc<T, D>(args, smem);
}

// Launches a tensor-core kernel with `smem` bytes of dynamic shared memory (above 48 KiB only
// after opting in).
template <typename Args>
cudaError_t launch_tc(void (*kernel)(Args), size_t smem, size_t blocks, const Args& args,
                      cudaStream_t stream) {
  if (smem > 48 * 1024) {
    const cudaError_t status = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (status != cudaSuccess) return status;
  }
  kernel<<<static_cast<unsigned>(blocks), kTcThreads, smem, stream>>>(args);
  return cudaGetLastError();
}

float scale_for(int d) { return 1.f / sqrtf(static_cast<float>(d)); }

template <typename T, int D>
cudaError_t forward_tc_typed(const void* q, const void* k, const void* v, void* out, float* lse,
                             const AttentionShape& s, cudaStream_t stream) {
  const ForwardArgs<T> args{static_cast<const T*>(q),
                            static_cast<const T*>(k),
                            static_cast<const T*>(v),
                            static_cast<T*>(out),
                            lse,
                            s.seq,
                            s.causal,
                            scale_for(D)};
  return launch_tc(forward_tc_kernel<T, D>, forward_smem_bytes<D>(), forward_blocks(s), args,
                   stream);
}

template <typename T, int D>
cudaError_t backward_tc_typed(const void* q, const void* k, const void* v, const void* out,
                              const float* lse, const void* grad_out, void* dq, void* dk, void* dv,
                              void* workspace, const AttentionShape& s, cudaStream_t stream) {
  const size_t rows = static_cast<size_t>(s.batch_heads) * s.seq;
  float* delta = static_cast<float*>(workspace);
  const Geometry per_row = elementwise_geometry(rows);
  delta_kernel<T, D><<<per_row.grid, per_row.threads, 0, stream>>>(
      static_cast<const T*>(out), static_cast<const T*>(grad_out), delta, static_cast<int>(rows));
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) return status;
  const BackwardArgs<T> args{static_cast<const T*>(q),
                             static_cast<const T*>(k),
                             static_cast<const T*>(v),
                             static_cast<const T*>(grad_out),
                             lse,
                             delta,
                             static_cast<T*>(dq),
                             static_cast<T*>(dk),
                             static_cast<T*>(dv),
                             s.seq,
                             s.causal,
                             scale_for(D)};
  status =
      launch_tc(backward_dkdv_tc_kernel<T, D>, dkdv_smem_bytes<D>(), tc_blocks(s), args, stream);
  if (status != cudaSuccess) return status;
  return launch_tc(backward_dq_tc_kernel<T, D>, dq_smem_bytes<D>(), tc_blocks(s), args, stream);
}

template <typename T, int D>
cudaError_t forward_typed(const void* q, const void* k, const void* v, void* out, float* lse,
                          const AttentionShape& s, cudaStream_t stream) {
  const Geometry g = tile_geometry(s);
  forward_kernel<T, D><<<g.grid, g.threads, 0, stream>>>(
      static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
      static_cast<T*>(out), lse, s.seq, s.causal, scale_for(D));
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
      s.causal, scale_for(D));
  convert_kernel<T>
      <<<per_element.grid, per_element.threads, 0, stream>>>(dq_accum, static_cast<T*>(dq), n);
  return cudaGetLastError();
}

bool valid(const AttentionShape& s) {
  return s.batch_heads > 0 && s.seq > 0 &&
         (s.head_dim == 32 || s.head_dim == 64 || s.head_dim == 128) &&
         tc_blocks(s) <= 0x7fffffffu;  // gridDim.x's limit
}

bool aligned16(std::initializer_list<const void*> pointers) {
  for (const void* p : pointers) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

// The forward for one 16-bit type: tensor cores at d = 64 and 128 on aligned buffers.
template <typename T>
cudaError_t forward_16bit(const void* q, const void* k, const void* v, void* out, float* lse,
                          const AttentionShape& s, cudaStream_t stream) {
  const bool tc = aligned16({q, k, v, out});
  if (s.head_dim == 64 && tc) return forward_tc_typed<T, 64>(q, k, v, out, lse, s, stream);
  if (s.head_dim == 128 && tc) return forward_tc_typed<T, 128>(q, k, v, out, lse, s, stream);
  if (s.head_dim == 32) return forward_typed<T, 32>(q, k, v, out, lse, s, stream);
  if (s.head_dim == 64) return forward_typed<T, 64>(q, k, v, out, lse, s, stream);
  return forward_typed<T, 128>(q, k, v, out, lse, s, stream);
}

template <typename T>
cudaError_t backward_16bit(const void* q, const void* k, const void* v, const void* out,
                           const float* lse, const void* grad_out, void* dq, void* dk, void* dv,
                           void* workspace, const AttentionShape& s, cudaStream_t stream) {
  const bool tc = aligned16({q, k, v, grad_out, dq, dk, dv});
#define DDPD_ARGS q, k, v, out, lse, grad_out, dq, dk, dv, workspace, s, stream
  if (s.head_dim == 64 && tc) return backward_tc_typed<T, 64>(DDPD_ARGS);
  if (s.head_dim == 128 && tc) return backward_tc_typed<T, 128>(DDPD_ARGS);
  if (s.head_dim == 32) return backward_typed<T, 32>(DDPD_ARGS);
  if (s.head_dim == 64) return backward_typed<T, 64>(DDPD_ARGS);
  return backward_typed<T, 128>(DDPD_ARGS);
#undef DDPD_ARGS
}

}  // namespace

size_t backward_workspace_bytes(const AttentionShape& s) {
  return workspace_floats(s) * sizeof(float);
}

cudaError_t flash_attention_forward(const void* q, const void* k, const void* v, void* out,
                                    float* lse, const AttentionShape& shape, DType dtype,
                                    cudaStream_t stream) {
  if (!valid(shape)) return cudaErrorInvalidValue;
  switch (dtype) {
    case DType::kBFloat16:
      return forward_16bit<__nv_bfloat16>(q, k, v, out, lse, shape, stream);
    case DType::kFloat16:
      return forward_16bit<__half>(q, k, v, out, lse, shape, stream);
    case DType::kFloat32:
      break;
  }
  if (shape.head_dim == 32) return forward_typed<float, 32>(q, k, v, out, lse, shape, stream);
  if (shape.head_dim == 64) return forward_typed<float, 64>(q, k, v, out, lse, shape, stream);
  return forward_typed<float, 128>(q, k, v, out, lse, shape, stream);
}

cudaError_t flash_attention_backward(const void* q, const void* k, const void* v, const void* out,
                                     const float* lse, const void* grad_out, void* dq, void* dk,
                                     void* dv, void* workspace, const AttentionShape& shape,
                                     DType dtype, cudaStream_t stream) {
  if (!valid(shape)) return cudaErrorInvalidValue;
#define DDPD_ARGS q, k, v, out, lse, grad_out, dq, dk, dv, workspace, shape, stream
  switch (dtype) {
    case DType::kBFloat16:
      return backward_16bit<__nv_bfloat16>(DDPD_ARGS);
    case DType::kFloat16:
      return backward_16bit<__half>(DDPD_ARGS);
    case DType::kFloat32:
      break;
  }
  if (shape.head_dim == 32) return backward_typed<float, 32>(DDPD_ARGS);
  if (shape.head_dim == 64) return backward_typed<float, 64>(DDPD_ARGS);
  return backward_typed<float, 128>(DDPD_ARGS);
#undef DDPD_ARGS
}

}  // namespace ddpd::kernels::cuda
