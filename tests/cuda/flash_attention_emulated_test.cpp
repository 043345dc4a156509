// The CUDA FlashAttention-2 kernel bodies, run on CPU threads by cuda_emulation.h with the
// launch geometry the real launches use, against the double-precision reference. The
// tensor-core kernels (flash_attention_tc.cuh) run with warps emulated lane by lane (mma,
// ldmatrix, cp.async, shuffles as PTX defines them), so fragment layouts, masking, the online
// softmax and barrier placement are checked without a GPU; the scalar kernels
// (flash_attention_kernels.cuh) likewise. Runs everywhere the CUDA headers are (CI included);
// the GPU test (flash_attention_cuda_test.cpp) checks the compiled kernels on the device.
#include <gtest/gtest.h>

#include "cuda/cuda_emulation.h"
// The kernels, compiled as plain C++ against the emulation above.
#include "../kernels/cuda/flash_attention_kernels.cuh"
#include "../kernels/cuda/flash_attention_tc.cuh"
#include "cuda/attention_reference.h"

namespace ddpd::kernels::cuda {
namespace {

using testing::emulation::dynamic_shared_memory;
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

// The scalar kernels: forward, δ, backward and the dQ conversion, as backward_typed launches.
template <typename T, int D>
Outputs run_scalar(const Inputs& in, const AttentionShape& shape) {
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

// The tensor-core kernels: forward, δ, dK/dV and dQ, as backward_tc_typed launches them.
template <typename T, int D>
Outputs run_tensor_core(const Inputs& in, const AttentionShape& shape) {
  const size_t rows = static_cast<size_t>(shape.batch_heads) * shape.seq, n = rows * D;
  const auto q = as<T>(in.q), k = as<T>(in.k), v = as<T>(in.v), w = as<T>(in.w);
  std::vector<T> out(n), dq(n), dk(n), dv(n);
  std::vector<float> lse(rows), delta(rows);
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  const dim3 grid(static_cast<unsigned>(detail::tc_blocks(shape)));
  const detail::ForwardArgs<T> forward{q.data(),   k.data(),  v.data(),     out.data(),
                                       lse.data(), shape.seq, shape.causal, scale};
  emulate_launch(
      dim3(static_cast<unsigned>(detail::forward_blocks(shape))), detail::kTcThreads,
      [&] { detail::forward_tc<T, D>(forward, dynamic_shared_memory()); },
      detail::forward_smem_bytes<D>());
  const auto per_row = detail::elementwise_geometry(rows);
  emulate_launch(per_row.grid, per_row.threads, [&] {
    detail::delta_kernel<T, D>(out.data(), w.data(), delta.data(), static_cast<int>(rows));
  });
  const detail::BackwardArgs<T> backward{q.data(),   k.data(),     v.data(),     w.data(),
                                         lse.data(), delta.data(), dq.data(),    dk.data(),
                                         dv.data(),  shape.seq,    shape.causal, scale};
  emulate_launch(
      grid, detail::kTcThreads,
      [&] { detail::backward_dkdv_tc<T, D>(backward, dynamic_shared_memory()); },
      detail::dkdv_smem_bytes<D>());
  emulate_launch(
      grid, detail::kTcThreads,
      [&] { detail::backward_dq_tc<T, D>(backward, dynamic_shared_memory()); },
      detail::dq_smem_bytes<D>());
  return {floats(out), floats(dq), floats(dk), floats(dv)};
}

template <typename T>
Outputs run_scalar_for_head_dim(const Inputs& in, const AttentionShape& shape) {
  switch (shape.head_dim) {
    case 32:
      return run_scalar<T, 32>(in, shape);
    case 64:
      return run_scalar<T, 64>(in, shape);
    default:
      return run_scalar<T, 128>(in, shape);
  }
}

template <typename T>
Outputs run_tensor_core_for_head_dim(const Inputs& in, const AttentionShape& shape) {
  return shape.head_dim == 64 ? run_tensor_core<T, 64>(in, shape)
                              : run_tensor_core<T, 128>(in, shape);
}

void expect_matches(const Case& c, const Outputs& got, const Inputs& in, int bh) {
  const auto ref = naive(in.q, in.k, in.v, in.w, bh, c.t, c.d, c.causal);
  EXPECT_LT(max_error(got.out, ref.out), tolerance_for(c, max_abs(ref.out)));
  EXPECT_LT(max_error(got.dq, ref.dq), tolerance_for(c, max_abs(ref.dq)));
  EXPECT_LT(max_error(got.dk, ref.dk), tolerance_for(c, max_abs(ref.dk)));
  EXPECT_LT(max_error(got.dv, ref.dv), tolerance_for(c, max_abs(ref.dv)));
}

class FlashCudaEmulated : public ::testing::TestWithParam<Case> {};

TEST_P(FlashCudaEmulated, ScalarKernelBodiesMatchNaiveAttention) {
  const Case c = GetParam();
  const Inputs in = random_inputs(c, kBatchHeads);
  const AttentionShape shape{kBatchHeads, c.t, c.d, c.causal};
  const Outputs got = c.precision == kBf16   ? run_scalar_for_head_dim<__nv_bfloat16>(in, shape)
                      : c.precision == kFp16 ? run_scalar_for_head_dim<__half>(in, shape)
                                             : run_scalar_for_head_dim<float>(in, shape);
  expect_matches(c, got, in, kBatchHeads);
}

INSTANTIATE_TEST_SUITE_P(Shapes, FlashCudaEmulated, ::testing::ValuesIn(kScalarCases), case_name);

// Two batch-heads at the short lengths check the per-head offsets; one at 100 and 130 keeps the
// whole suite near 45 s on 2 cores (each emulated block is 128 threads and a warp barrier per
// mma, ldmatrix and shuffle).
int emulated_heads(const Case& c) { return c.t <= 64 ? 2 : 1; }

class FlashCudaTensorCoreEmulated : public ::testing::TestWithParam<Case> {};

TEST_P(FlashCudaTensorCoreEmulated, KernelBodiesMatchNaiveAttention) {
  const Case c = GetParam();
  const int heads = emulated_heads(c);
  const Inputs in = random_inputs(c, heads);
  const AttentionShape shape{heads, c.t, c.d, c.causal};
  const int races_before = testing::emulation::shared_memory_races();
  const Outputs got = c.precision == kBf16 ? run_tensor_core_for_head_dim<__nv_bfloat16>(in, shape)
                                           : run_tensor_core_for_head_dim<__half>(in, shape);
  expect_matches(c, got, in, heads);
  EXPECT_EQ(testing::emulation::shared_memory_races(), races_before)
      << "a shared tile read and rewritten (or written twice) between the same two barriers";
}

INSTANTIATE_TEST_SUITE_P(Shapes, FlashCudaTensorCoreEmulated,
                         ::testing::ValuesIn(tensor_core_cases()), case_name);

}  // namespace
}  // namespace ddpd::kernels::cuda
