#include "ddpd/kernels/flash_attention.h"

#include <cmath>
#include <limits>
#include <stdexcept>

#include "ddpd/kernels/vector_math_warm_up.h"
#include "flash_attention_cuda_op.h"

namespace ddpd::kernels {
namespace {

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

// Masks scores s [n, rows, cols] of the tile at (row0, col0) so query r sees keys c <= r.
void mask_causal_tile(torch::Tensor& s, int64_t row0, int64_t col0) {
  const int64_t rows = s.size(1), cols = s.size(2);
  if (col0 + cols - 1 <= row0) return;  // the whole tile is at or below the diagonal
  const auto index = s.options().dtype(torch::kLong);
  auto r = torch::arange(row0, row0 + rows, index).unsqueeze(1);
  auto c = torch::arange(col0, col0 + cols, index).unsqueeze(0);
  s.masked_fill_((c > r).unsqueeze(0), kMinusInf);
}

// The tiles are computed in at least float32: bf16 and fp16 inputs are upcast (their sums would
// lose too much), float64 inputs stay float64 (the tests verify the algorithm in float64).
at::ScalarType compute_dtype(const torch::Tensor& x) {
  return at::promote_types(x.scalar_type(), torch::kFloat32);
}

struct Forward {
  torch::Tensor out;  // [n, t, d], in compute_dtype
  torch::Tensor lse;  // [n, t] log-sum-exp of each query's scaled scores
};

// q, k, v: [n, t, d], in compute_dtype.
Forward tiled_forward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                      const FlashAttentionOptions& o) {
  const int64_t n = q.size(0), t = q.size(1), d = q.size(2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  Forward f{torch::empty_like(q), torch::empty({n, t}, q.options())};
  for (int64_t i = 0; i < t; i += o.block_q) {
    const int64_t rows = std::min(o.block_q, t - i);
    auto qi = q.narrow(1, i, rows);
    auto m = torch::full({n, rows}, kMinusInf, q.options());  // running row max
    auto l = torch::zeros({n, rows}, q.options());            // running softmax denominator
    auto acc = torch::zeros({n, rows, d}, q.options());       // running unnormalised output
    const int64_t kv_end = o.causal ? i + rows : t;           // later keys are all masked
    for (int64_t j = 0; j < kv_end; j += o.block_k) {
      const int64_t cols = std::min(o.block_k, kv_end - j);
      auto s = torch::bmm(qi, k.narrow(1, j, cols).transpose(1, 2)).mul_(scale);
      if (o.causal) mask_causal_tile(s, i, j);
      auto m_new = torch::maximum(m, std::get<0>(s.max(-1)));
      auto p = (s - m_new.unsqueeze(-1)).exp_();
      auto correction = (m - m_new).exp_();  // rescales what was summed under the old max
      l = l.mul_(correction).add_(p.sum(-1));
      acc = acc.mul_(correction.unsqueeze(-1)).add_(torch::bmm(p, v.narrow(1, j, cols)));
      m = m_new;
    }
    // Causal rows always see key 0, so l > 0: no fully masked row.
    f.out.narrow(1, i, rows).copy_(acc / l.unsqueeze(-1));
    f.lse.narrow(1, i, rows).copy_(m + l.log());
  }
  return f;
}

// Gradients of tiled_forward, recomputing each tile's probabilities from the saved lse.
torch::autograd::variable_list tiled_backward(const torch::Tensor& q, const torch::Tensor& k,
                                              const torch::Tensor& v, const torch::Tensor& out,
                                              const torch::Tensor& lse,
                                              const torch::Tensor& grad_out,
                                              const FlashAttentionOptions& o) {
  const int64_t t = q.size(1), d = q.size(2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  auto dq = torch::zeros_like(q), dk = torch::zeros_like(k), dv = torch::zeros_like(v);
  auto delta = (grad_out * out).sum(-1);  // rowsum(dO ∘ O) = Σ_j P_ij dP_ij
  for (int64_t j = 0; j < t; j += o.block_k) {
    const int64_t cols = std::min(o.block_k, t - j);
    auto kj = k.narrow(1, j, cols), vj = v.narrow(1, j, cols);
    auto dkj = dk.narrow(1, j, cols), dvj = dv.narrow(1, j, cols);
    // Causal: query tiles wholly above this key tile's first row see none of it.
    const int64_t first_row = o.causal ? (j / o.block_q) * o.block_q : 0;
    for (int64_t i = first_row; i < t; i += o.block_q) {
      const int64_t rows = std::min(o.block_q, t - i);
      auto qi = q.narrow(1, i, rows), doi = grad_out.narrow(1, i, rows);
      auto s = torch::bmm(qi, kj.transpose(1, 2)).mul_(scale);
      if (o.causal) mask_causal_tile(s, i, j);
      auto p = (s - lse.narrow(1, i, rows).unsqueeze(-1)).exp_();
      dvj.add_(torch::bmm(p.transpose(1, 2), doi));
      auto dp = torch::bmm(doi, vj.transpose(1, 2));
      auto ds = p.mul_(dp.sub_(delta.narrow(1, i, rows).unsqueeze(-1)));
      dq.narrow(1, i, rows).add_(torch::bmm(ds, kj), scale);
      dkj.add_(torch::bmm(ds.transpose(1, 2), qi), scale);
    }
  }
  return {dq, dk, dv};
}

class FlashAttentionFunction : public torch::autograd::Function<FlashAttentionFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q,
                               const torch::Tensor& k, const torch::Tensor& v, bool causal,
                               int64_t block_q, int64_t block_k) {
    const auto shape = q.sizes().vec();
    const int64_t t = q.size(-2), d = q.size(-1);
    auto flat = [&](const torch::Tensor& x) {
      return x.reshape({-1, t, d}).to(compute_dtype(q)).contiguous();
    };
    auto qf = flat(q), kf = flat(k), vf = flat(v);
    const FlashAttentionOptions options{causal, block_q, block_k};
    Forward f = tiled_forward(qf, kf, vf, options);
    ctx->save_for_backward({qf, kf, vf, f.out, f.lse});
    ctx->saved_data["causal"] = causal;
    ctx->saved_data["block_q"] = block_q;
    ctx->saved_data["block_k"] = block_k;
    return f.out.view(shape).to(q.scalar_type());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto& qf = saved[0];
    const FlashAttentionOptions options{ctx->saved_data["causal"].toBool(),
                                        ctx->saved_data["block_q"].toInt(),
                                        ctx->saved_data["block_k"].toInt()};
    const auto shape = grads[0].sizes().vec();
    auto grad_out = grads[0].reshape(qf.sizes()).to(qf.scalar_type()).contiguous();
    auto g = tiled_backward(qf, saved[1], saved[2], saved[3], saved[4], grad_out, options);
    const auto dtype = grads[0].scalar_type();
    return {g[0].view(shape).to(dtype),
            g[1].view(shape).to(dtype),
            g[2].view(shape).to(dtype),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

torch::Tensor flash_attention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, const FlashAttentionOptions& options) {
  if (q.dim() < 2 || q.sizes() != k.sizes() || q.sizes() != v.sizes()) {
    throw std::invalid_argument("flash_attention: q, k and v must share one [..., t, d] shape");
  }
  if (options.block_q <= 0 || options.block_k <= 0) {
    throw std::invalid_argument("flash_attention: block sizes must be > 0");
  }
  // CUDA tensors of a shape and dtype the CUDA kernels take go to them; anything else (other
  // head dims, fp16, CPU) runs the tiled algorithm below in LibTorch ops on q's device.
  if (cuda_kernels_take(q, k, v)) return flash_attention_cuda(q, k, v, options.causal);
  warm_up_vector_math();  // the tiles' exp_ runs in parallel: see vector_math_warm_up.h
  return FlashAttentionFunction::apply(q, k, v, options.causal, options.block_q, options.block_k);
}

torch::Tensor naive_attention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, bool causal) {
  const int64_t t = q.size(-2);
  auto scores = torch::matmul(q, k.transpose(-1, -2)) / std::sqrt(static_cast<double>(q.size(-1)));
  if (causal) {
    const auto mask_options = torch::TensorOptions().dtype(torch::kBool).device(q.device());
    scores = scores.masked_fill(torch::ones({t, t}, mask_options).triu(1), kMinusInf);
  }
  return torch::matmul(scores.softmax(-1), v);
}

}  // namespace ddpd::kernels
