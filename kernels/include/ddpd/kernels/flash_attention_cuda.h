// FlashAttention-2 forward and backward as CUDA kernels (kernels/cuda/flash_attention.cu),
// on raw device buffers so the library needs only the CUDA runtime, not LibTorch. Built when
// CMake finds a CUDA compiler (DDPD_HAVE_CUDA_KERNELS). bf16 and fp16 at head dims 64 and 128
// on 16-byte aligned buffers run on tensor cores (mma.sync); everything else (float32, head
// dim 32, unaligned buffers) on scalar float32 kernels.
#pragma once

#include <cuda_runtime.h>

namespace ddpd::kernels::cuda {

enum class DType { kFloat32, kBFloat16, kFloat16 };

struct AttentionShape {
  int batch_heads = 1;  // leading dimensions flattened
  int seq = 0;          // t
  int head_dim = 64;    // d: 32, 64 or 128
  bool causal = true;
};

// q, k, v, out: [batch_heads, seq, head_dim] contiguous in `dtype`; lse: [batch_heads, seq]
// float32 (log-sum-exp of each query's scaled scores, kept for backward).
// Returns cudaErrorInvalidValue for an unsupported head_dim or a bad shape.
cudaError_t flash_attention_forward(const void* q, const void* k, const void* v, void* out,
                                    float* lse, const AttentionShape& shape, DType dtype,
                                    cudaStream_t stream);

// grad_out: [batch_heads, seq, head_dim] in `dtype`; writes dq, dk, dv (same layout, `dtype`).
// workspace: at least backward_workspace_bytes(shape) of device memory.
cudaError_t flash_attention_backward(const void* q, const void* k, const void* v, const void* out,
                                     const float* lse, const void* grad_out, void* dq, void* dk,
                                     void* dv, void* workspace, const AttentionShape& shape,
                                     DType dtype, cudaStream_t stream);
size_t backward_workspace_bytes(const AttentionShape& shape);

}  // namespace ddpd::kernels::cuda
