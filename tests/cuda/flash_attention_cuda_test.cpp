// The CUDA FlashAttention-2 kernels against a double-precision naive reference on the host:
// outputs and gradients, causal and not, lengths no tile divides, fp32, bf16 and fp16; the
// tensor-core kernels (bf16 / fp16 at head dims 64 and 128), the scalar ones (fp32, head dim
// 32, unaligned buffers), and a long sequence through many tiles. Needs a GPU: skips where
// there is none (no /dev/nvidiaN: gpu_presence.h), fails where one is present and CUDA errs,
// so a broken driver cannot read as green. The kernels still compile in CI, and their
// bodies run there under emulation (flash_attention_emulated_test.cpp).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/attention_reference.h"
#include "cuda/gpu_presence.h"
#include "ddpd/kernels/flash_attention_cuda.h"

namespace ddpd::kernels::cuda {
namespace {

#define ASSERT_CUDA(call)                                                            \
  do {                                                                               \
    const cudaError_t status_ = (call);                                              \
    ASSERT_EQ(status_, cudaSuccess) << #call << ": " << cudaGetErrorString(status_); \
  } while (0)

size_t element_bytes(Precision p) { return p == kFp32 ? 4 : 2; }

// Host floats as the case's device format, and back.
std::vector<char> encode(const std::vector<float>& x, Precision p) {
  std::vector<char> bytes(x.size() * element_bytes(p));
  for (size_t i = 0; i < x.size(); ++i) {
    if (p == kBf16) {
      const __nv_bfloat16 h = __float2bfloat16(x[i]);
      std::memcpy(&bytes[2 * i], &h, 2);
    } else if (p == kFp16) {
      const __half h = __float2half(x[i]);
      std::memcpy(&bytes[2 * i], &h, 2);
    } else {
      std::memcpy(&bytes[4 * i], &x[i], 4);
    }
  }
  return bytes;
}
std::vector<float> decode(const std::vector<char>& bytes, Precision p) {
  std::vector<float> x(bytes.size() / element_bytes(p));
  for (size_t i = 0; i < x.size(); ++i) {
    if (p == kBf16) {
      __nv_bfloat16 h;
      std::memcpy(&h, &bytes[2 * i], 2);
      x[i] = __bfloat162float(h);
    } else if (p == kFp16) {
      __half h;
      std::memcpy(&h, &bytes[2 * i], 2);
      x[i] = __half2float(h);
    } else {
      std::memcpy(&x[i], &bytes[4 * i], 4);
    }
  }
  return x;
}

// Device buffers for one run; `offset` bytes past cudaMalloc's alignment (2: the scalar
// kernels' fallback for unaligned 16-bit buffers).
struct DeviceBuffers {
  std::vector<void*> allocations;
  ~DeviceBuffers() {
    for (void* p : allocations) cudaFree(p);
  }
  char* make(size_t bytes, size_t offset) {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes + offset) != cudaSuccess) return nullptr;
    allocations.push_back(p);
    return static_cast<char*>(p) + offset;
  }
};

// Forward and backward on the device, compared with the double reference.
void run_and_compare(const Case& c, int bh, size_t offset = 0) {
  const size_t n = static_cast<size_t>(bh) * c.t * c.d, bytes = n * element_bytes(c.precision);
  const Inputs in = random_inputs(c, bh);
  DeviceBuffers buffers;
  std::vector<char*> io;  // q, k, v, w, out, dq, dk, dv
  for (int i = 0; i < 8; ++i) io.push_back(buffers.make(bytes, offset));
  const AttentionShape shape{bh, c.t, c.d, c.causal};
  auto* lse = reinterpret_cast<float*>(buffers.make(bh * c.t * sizeof(float), 0));
  char* workspace = buffers.make(backward_workspace_bytes(shape), 0);
  for (char* p : io) ASSERT_NE(p, nullptr) << "cudaMalloc";
  ASSERT_NE(lse, nullptr);
  ASSERT_NE(workspace, nullptr);
  const std::vector<const std::vector<float>*> host{&in.q, &in.k, &in.v, &in.w};
  for (int i = 0; i < 4; ++i) {
    const auto encoded = encode(*host[i], c.precision);
    ASSERT_CUDA(cudaMemcpy(io[i], encoded.data(), bytes, cudaMemcpyHostToDevice));
  }
  const DType dtype = c.precision == kBf16   ? DType::kBFloat16
                      : c.precision == kFp16 ? DType::kFloat16
                                             : DType::kFloat32;
  ASSERT_CUDA(flash_attention_forward(io[0], io[1], io[2], io[4], lse, shape, dtype, nullptr));
  ASSERT_CUDA(flash_attention_backward(io[0], io[1], io[2], io[4], lse, io[3], io[5], io[6], io[7],
                                       workspace, shape, dtype, nullptr));
  ASSERT_CUDA(cudaDeviceSynchronize());
  const auto ref = naive(in.q, in.k, in.v, in.w, bh, c.t, c.d, c.causal);
  const std::vector<const std::vector<double>*> want{&ref.out, &ref.dq, &ref.dk, &ref.dv};
  const char* names[] = {"out", "dq", "dk", "dv"};
  for (int i = 0; i < 4; ++i) {
    std::vector<char> got(bytes);
    ASSERT_CUDA(cudaMemcpy(got.data(), io[4 + i], bytes, cudaMemcpyDeviceToHost));
    EXPECT_LT(max_error(decode(got, c.precision), *want[i]), tolerance_for(c, max_abs(*want[i])))
        << names[i];
  }
}

class FlashCuda : public ::testing::TestWithParam<Case> {};

TEST_P(FlashCuda, MatchesNaiveAttention) {
  REQUIRE_GPUS(1);
  run_and_compare(GetParam(), kBatchHeads);
}

INSTANTIATE_TEST_SUITE_P(Scalar, FlashCuda, ::testing::ValuesIn(kScalarCases), case_name);
INSTANTIATE_TEST_SUITE_P(TensorCores, FlashCuda, ::testing::ValuesIn(tensor_core_cases()),
                         case_name);

// Many tiles: 16 query tiles x 16 key tiles per head, the pipelines' steady state.
TEST(FlashCudaLong, Bf16HeadDim128Length1024) {
  REQUIRE_GPUS(1);
  run_and_compare({1024, 128, true, kBf16}, 2);
  run_and_compare({1024, 128, false, kBf16}, 2);
}

// 16-bit buffers 2 bytes off 16-byte alignment take the scalar kernels, with the same values.
TEST(FlashCudaShapes, UnalignedBuffersFallBackToScalarKernels) {
  REQUIRE_GPUS(1);
  run_and_compare({77, 64, true, kFp16}, 2, 2);
  run_and_compare({65, 128, false, kBf16}, 2, 2);
}

TEST(FlashCudaShapes, RejectsUnsupportedHeadDim) {
  const AttentionShape shape{1, 16, 48, true};
  EXPECT_EQ(flash_attention_forward(nullptr, nullptr, nullptr, nullptr, nullptr, shape,
                                    DType::kFloat32, nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace ddpd::kernels::cuda
