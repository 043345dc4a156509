// The CUDA FlashAttention-2 kernel bodies (kernels/cuda/flash_attention_kernels.cuh), run on
// CPU threads by cuda_emulation.h with the launch geometry the real launches use, against the
// double-precision reference: the same shapes as the GPU test. Runs everywhere the CUDA
// headers are (CI included), so the kernels' logic is checked without a GPU; the GPU test
// (flash_attention_cuda_test.cpp) checks them on the device.
#include <gtest/gtest.h>

#include "cuda/cuda_emulation.h"
// The kernels, compiled as plain C++ against the emulation above.
#include "../kernels/cuda/flash_attention_kernels.cuh"
#include "cuda/attention_reference.h"

namespace ddpd::kernels::cuda {
namespace {

using testing::emulation::emulate_launch;

struct Outputs {
  std::vector<float> out, dq, dk, dv;
};

template <typename T>
std::vector<T> as(const std::vector<float>& x) {
  std::vector<T> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = T(x[i]);
  return out;
}
template <typename T>
std::vector<float> floats(const std::vector<T>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = float(x[i]);
  return out;
}

// Forward, δ, backward and the dQ conversion, launched as backward_typed launches them.
template <typename T, int D>
Outputs run_kernels(const Inputs& in, const AttentionShape& shape) {
  const size_t rows = static_cast<size_t>(shape.batch_heads) * shape.seq, n = rows * D;
  const auto q = as<T>(in.q), k = as<T>(in.k), v = as<T>(in.v), w = as<T>(in.w);
  std::vector<T> out(n), dq(n), dk(n), dv(n);
  std::vector<float> lse(rows);
  std::vector<float> workspace(detail::workspace_floats(shape), 12345.f);  // not pre-zeroed
  float* delta = workspace.data();
  float* dq_accum = delta + rows;
  std::fill(dq_accum, dq_accum + n, 0.f);  // backward_typed's cudaMemsetAsync
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  const auto tiles = detail::tile_geometry(shape);
  emulate_launch(tiles.grid, tiles.threads, [&] {
    detail::forward_kernel<T, D>(q.data(), k.data(), v.data(), out.data(), lse.data(), shape.seq,
                                 shape.causal, scale);
  });
  const auto per_row = detail::elementwise_geometry(rows);
  emulate_launch(per_row.grid, per_row.threads, [&] {
    detail::delta_kernel<T, D>(out.data(), w.data(), delta, static_cast<int>(rows));
  });
  emulate_launch(tiles.grid, tiles.threads, [&] {
    detail::backward_kernel<T, D>(q.data(), k.data(), v.data(), lse.data(), delta, w.data(),
                                  dq_accum, dk.data(), dv.data(), shape.seq, shape.causal, scale);
  });
  const auto per_element = detail::elementwise_geometry(n);
  emulate_launch(per_element.grid, per_element.threads,
                 [&] { detail::convert_kernel<T>(dq_accum, dq.data(), n); });
  return {floats(out), floats(dq), floats(dk), floats(dv)};
}

template <typename T>
Outputs run_for_head_dim(const Inputs& in, const AttentionShape& shape) {
  switch (shape.head_dim) {
    case 32:
      return run_kernels<T, 32>(in, shape);
    case 64:
      return run_kernels<T, 64>(in, shape);
    default:
      return run_kernels<T, 128>(in, shape);
  }
}

class FlashCudaEmulated : public ::testing::TestWithParam<Case> {};

TEST_P(FlashCudaEmulated, KernelBodiesMatchNaiveAttention) {
  const Case c = GetParam();
  const Inputs in = random_inputs(c, kBatchHeads);
  const AttentionShape shape{kBatchHeads, c.t, c.d, c.causal};
  const Outputs got =
      c.bf16 ? run_for_head_dim<__nv_bfloat16>(in, shape) : run_for_head_dim<float>(in, shape);
  const auto ref = naive(in.q, in.k, in.v, in.w, kBatchHeads, c.t, c.d, c.causal);
  const double tolerance = tolerance_for(c);
  EXPECT_LT(max_error(got.out, ref.out), tolerance);
  EXPECT_LT(max_error(got.dq, ref.dq), tolerance);
  EXPECT_LT(max_error(got.dk, ref.dk), tolerance);
  EXPECT_LT(max_error(got.dv, ref.dv), tolerance);
}

INSTANTIATE_TEST_SUITE_P(Shapes, FlashCudaEmulated, ::testing::ValuesIn(kCases), case_name);

}  // namespace
}  // namespace ddpd::kernels::cuda
