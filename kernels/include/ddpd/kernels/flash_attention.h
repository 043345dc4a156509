// FlashAttention-2 (Dao, 2023): attention computed tile by tile with an online softmax, so the
// [t, t] score matrix never exists in full; backward recomputes the scores of each tile from the
// saved log-sum-exp instead of storing the attention matrix. This is the CPU implementation of
// the tiled algorithm, always built and tested against naive_attention.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace ddpd::kernels {

struct FlashAttentionOptions {
  bool causal = true;    // query i attends to keys j <= i
  int64_t block_q = 64;  // query rows per tile
  int64_t block_k = 64;  // key/value rows per tile
};

// q, k, v: [..., t, d] with the same leading dimensions (e.g. [batch, heads, t, d]). Returns
// softmax(q kᵀ / sqrt(d) [+ causal mask]) v with q's shape and dtype; differentiable with
// respect to q, k and v. Accumulates in at least float32 (bf16 and fp16 inputs are upcast;
// float64 stays float64).
// Throws std::invalid_argument on mismatched shapes or non-positive block sizes.
torch::Tensor flash_attention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, const FlashAttentionOptions& options = {});

// The reference: the full score matrix, masked, softmaxed, times v (autograd does backward).
torch::Tensor naive_attention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, bool causal);

}  // namespace ddpd::kernels
