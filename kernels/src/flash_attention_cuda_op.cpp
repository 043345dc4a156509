#include "flash_attention_cuda_op.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "ddpd/kernels/flash_attention_cuda.h"

namespace ddpd::kernels {
namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string("flash_attention_cuda: ") + what + ": " +
                             cudaGetErrorString(status));
  }
}

cuda::DType dtype_of(const torch::Tensor& x) {
  switch (x.scalar_type()) {
    case torch::kBFloat16:
      return cuda::DType::kBFloat16;
    case torch::kHalf:
      return cuda::DType::kFloat16;
    default:
      return cuda::DType::kFloat32;
  }
}

// Contiguous and 16-byte aligned: the tensor-core kernels copy rows 16 bytes at a time (on an
// unaligned buffer the library falls back to its scalar kernels, which spill at d = 64 and 128).
torch::Tensor prepared(const torch::Tensor& x) {
  auto out = x.contiguous();
  if (reinterpret_cast<uintptr_t>(out.data_ptr()) % 16 != 0) out = out.clone();
  return out;
}

class FlashAttentionCudaFunction : public torch::autograd::Function<FlashAttentionCudaFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q,
                               const torch::Tensor& k, const torch::Tensor& v, bool causal) {
    const c10::cuda::CUDAGuard guard(q.device());
    const auto shape = q.sizes().vec();
    const int64_t t = q.size(-2), d = q.size(-1);
    auto flat = [&](const torch::Tensor& x) { return prepared(x.reshape({-1, t, d})); };
    auto qf = flat(q), kf = flat(k), vf = flat(v);
    const cuda::AttentionShape dims{static_cast<int>(qf.size(0)), static_cast<int>(t),
                                    static_cast<int>(d), causal};
    auto out = torch::empty_like(qf);
    auto lse = torch::empty({qf.size(0), t}, qf.options().dtype(torch::kFloat32));
    check(cuda::flash_attention_forward(qf.data_ptr(), kf.data_ptr(), vf.data_ptr(), out.data_ptr(),
                                        lse.data_ptr<float>(), dims, dtype_of(qf),
                                        at::cuda::getCurrentCUDAStream()),
          "forward");
    ctx->save_for_backward({qf, kf, vf, out, lse});
    ctx->saved_data["causal"] = causal;
    return out.view(shape);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto &qf = saved[0], &kf = saved[1], &vf = saved[2], &out = saved[3], &lse = saved[4];
    const c10::cuda::CUDAGuard guard(qf.device());
    const cuda::AttentionShape dims{static_cast<int>(qf.size(0)), static_cast<int>(qf.size(1)),
                                    static_cast<int>(qf.size(2)),
                                    ctx->saved_data["causal"].toBool()};
    const auto shape = grads[0].sizes().vec();
    auto grad_out = prepared(grads[0].reshape(qf.sizes()).to(qf.scalar_type()));
    auto dq = torch::empty_like(qf), dk = torch::empty_like(kf), dv = torch::empty_like(vf);
    auto workspace = torch::empty({static_cast<int64_t>(cuda::backward_workspace_bytes(dims))},
                                  qf.options().dtype(torch::kUInt8));
    check(cuda::flash_attention_backward(
              qf.data_ptr(), kf.data_ptr(), vf.data_ptr(), out.data_ptr(), lse.data_ptr<float>(),
              grad_out.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr(),
              workspace.data_ptr(), dims, dtype_of(qf), at::cuda::getCurrentCUDAStream()),
          "backward");
    return {dq.view(shape), dk.view(shape), dv.view(shape), torch::Tensor()};
  }
};

}  // namespace

bool cuda_kernels_take(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  if (!q.is_cuda() || q.dim() < 2 || q.sizes() != k.sizes() || q.sizes() != v.sizes()) return false;
  const auto dtype = q.scalar_type();
  if (k.scalar_type() != dtype || v.scalar_type() != dtype) return false;
  const int64_t d = q.size(-1);
  // bf16 and fp16: tensor cores at d = 64 and 128, the scalar kernels at 32. float32: the
  // scalar kernels at d = 32 and 64; at 128 both of them hit 255 registers and spill, so
  // LibTorch's tiled path (cuBLAS) runs float32 there instead.
  if (dtype == torch::kBFloat16 || dtype == torch::kHalf) return d == 32 || d == 64 || d == 128;
  return dtype == torch::kFloat32 && (d == 32 || d == 64);
}

torch::Tensor flash_attention_cuda(const torch::Tensor& q, const torch::Tensor& k,
                                   const torch::Tensor& v, bool causal) {
  if (!cuda_kernels_take(q, k, v)) {
    throw std::invalid_argument(
        "flash_attention_cuda: needs CUDA q, k, v of one shape and dtype: bfloat16 or float16 "
        "with head dim 32, 64 or 128, or float32 with head dim 32 or 64");
  }
  return FlashAttentionCudaFunction::apply(q, k, v, causal);
}

}  // namespace ddpd::kernels
