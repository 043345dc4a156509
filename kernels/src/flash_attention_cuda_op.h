// The CUDA FlashAttention-2 kernels (kernels/cuda) as a LibTorch autograd function;
// flash_attention() routes CUDA inputs here. Exactly one implementation is linked, as for
// core/src/device/device.h: flash_attention_cuda_op.cpp in the CUDA binaries (ddpd_kernels_cuda),
// flash_attention_no_cuda.cpp in the CPU ones (ddpd_kernels), where no CUDA tensor can exist.
#pragma once

#include <torch/torch.h>

namespace ddpd::kernels {

// True for CUDA q, k, v of one shape [..., t, d] and one dtype, bfloat16 or float16 with d in
// {32, 64, 128} (tensor cores at 64 and 128) or float32 with d in {32, 64} (scalar kernels;
// their d = 128 instantiations spill registers, so float32 at 128 is left to LibTorch).
bool cuda_kernels_take(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

// softmax(q kᵀ / sqrt(d) [+ causal mask]) v on the current CUDA stream; differentiable in q, k
// and v (backward recomputes each tile's probabilities from the saved log-sum-exp).
torch::Tensor flash_attention_cuda(const torch::Tensor& q, const torch::Tensor& k,
                                   const torch::Tensor& v, bool causal);

}  // namespace ddpd::kernels
