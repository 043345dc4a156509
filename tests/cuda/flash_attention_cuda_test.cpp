// The CUDA FlashAttention-2 kernels against a double-precision naive reference on the host:
// outputs and gradients, causal and not, lengths no tile divides, fp32 and bf16. Needs a GPU:
// skips with a message where none is present (the kernels still compile in CI).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cuda/attention_reference.h"
#include "ddpd/kernels/flash_attention_cuda.h"

namespace ddpd::kernels::cuda {
namespace {

bool have_gpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

class FlashCuda : public ::testing::TestWithParam<Case> {};

TEST_P(FlashCuda, MatchesNaiveAttention) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device: the CUDA kernels are compiled, not run";
  const Case c = GetParam();
  const int bh = kBatchHeads;
  const size_t n = static_cast<size_t>(bh) * c.t * c.d;
  const Inputs in = random_inputs(c, bh);
  const auto &q = in.q, &k = in.k, &v = in.v, &w = in.w;
  const size_t elem = c.bf16 ? sizeof(__nv_bfloat16) : sizeof(float);
  auto upload = [&](const std::vector<float>& x) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, n * elem), cudaSuccess);
    if (c.bf16) {
      std::vector<__nv_bfloat16> h(n);
      for (size_t i = 0; i < n; ++i) h[i] = __float2bfloat16(x[i]);
      cudaMemcpy(p, h.data(), n * elem, cudaMemcpyHostToDevice);
    } else {
      cudaMemcpy(p, x.data(), n * elem, cudaMemcpyHostToDevice);
    }
    return p;
  };
  auto download = [&](const void* p) {
    std::vector<float> x(n);
    if (c.bf16) {
      std::vector<__nv_bfloat16> h(n);
      cudaMemcpy(h.data(), p, n * elem, cudaMemcpyDeviceToHost);
      for (size_t i = 0; i < n; ++i) x[i] = __bfloat162float(h[i]);
    } else {
      cudaMemcpy(x.data(), p, n * elem, cudaMemcpyDeviceToHost);
    }
    return x;
  };
  void *dq_ = upload(q), *dk_ = upload(k), *dv_ = upload(v), *dw = upload(w);
  void *out = upload(q), *gq = upload(q), *gk = upload(q), *gv = upload(q), *workspace = nullptr;
  float* lse = nullptr;
  const AttentionShape shape{bh, c.t, c.d, c.causal};
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&lse), bh * c.t * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&workspace, backward_workspace_bytes(shape)), cudaSuccess);
  const DType dtype = c.bf16 ? DType::kBFloat16 : DType::kFloat32;
  ASSERT_EQ(flash_attention_forward(dq_, dk_, dv_, out, lse, shape, dtype, nullptr), cudaSuccess);
  ASSERT_EQ(flash_attention_backward(dq_, dk_, dv_, out, lse, dw, gq, gk, gv, workspace, shape,
                                     dtype, nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto ref = naive(q, k, v, w, bh, c.t, c.d, c.causal);
  const double tolerance = tolerance_for(c);
  EXPECT_LT(max_error(download(out), ref.out), tolerance);
  EXPECT_LT(max_error(download(gq), ref.dq), tolerance);
  EXPECT_LT(max_error(download(gk), ref.dk), tolerance);
  EXPECT_LT(max_error(download(gv), ref.dv), tolerance);
  for (void* p : {dq_, dk_, dv_, dw, out, gq, gk, gv, workspace, static_cast<void*>(lse)}) {
    cudaFree(p);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, FlashCuda, ::testing::ValuesIn(kCases), case_name);

TEST(FlashCudaShapes, RejectsUnsupportedHeadDim) {
  const AttentionShape shape{1, 16, 48, true};
  EXPECT_EQ(flash_attention_forward(nullptr, nullptr, nullptr, nullptr, nullptr, shape,
                                    DType::kFloat32, nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace ddpd::kernels::cuda
