// The reference for the CUDA FlashAttention-2 kernels, shared by the GPU test and the emulated
// test: naive attention in double precision on the host, the shapes both run, and their inputs.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <gtest/gtest.h>
#include <algorithm>
#include <cmath>

#include <ostream>
#include <random>
#include <string>
#include <vector>

namespace ddpd::kernels::cuda {

enum class Precision { kFp32, kBf16, kFp16 };

struct Case {
  int t, d;
  bool causal;
  Precision precision;
};
constexpr Precision kFp32 = Precision::kFp32, kBf16 = Precision::kBf16, kFp16 = Precision::kFp16;

// The scalar kernels' shapes (fp32 at every head dim, 16-bit at head dim 32): lengths no tile
// divides (their tiles are 64 query rows and 32 key rows), causal and not.
inline const std::vector<Case> kScalarCases{
    {1, 32, true, kFp32},    {77, 32, true, kFp32},  {77, 64, false, kFp32}, {130, 64, true, kFp32},
    {130, 128, true, kFp32}, {65, 32, false, kBf16}, {77, 32, true, kFp16}};

// The tensor-core kernels' shapes (bf16 and fp16, head dims 64 and 128, causal and not):
// one key tile, tails of 17 and 36 rows, and 1 (a single query and key).
inline std::vector<Case> tensor_core_cases() {
  std::vector<Case> cases;
  for (const Precision p : {kBf16, kFp16}) {
    for (const int d : {64, 128}) {
      for (const bool causal : {true, false}) {
        for (const int t : {1, 17, 100, 130}) cases.push_back({t, d, causal, p});
      }
    }
  }
  return cases;
}
constexpr int kBatchHeads = 3;

inline const char* precision_name(Precision p) {
  return p == kFp32 ? "fp32" : p == kBf16 ? "bf16" : "fp16";
}

// Test names show the case, not its bytes.
inline void PrintTo(const Case& c, std::ostream* os) {
  *os << "t=" << c.t << " d=" << c.d << (c.causal ? " causal " : " ")
      << precision_name(c.precision);
}

// A GoogleTest parameter name: t77_d64_causal_fp32.
inline std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return "t" + std::to_string(c.t) + "_d" + std::to_string(c.d) +
         (c.causal ? "_causal_" : "_full_") + precision_name(c.precision);
}

// Unit roundoff of the 16-bit formats: 2^-8 (bf16, 8 significant bits), 2^-11 (fp16).
inline double unit_roundoff(Precision p) {
  return p == kBf16 ? 1.0 / 256 : p == kFp16 ? 1.0 / 2048 : 0.0;
}

// Allowed |kernel - reference| for one output whose reference's largest magnitude is `scale`.
// fp32 (scalar kernels, float32 throughout): 2e-4. 16-bit: inputs are rounded before the
// reference sees them, so the error comes from (1) the result rounded to 16 bits: u·|x|;
// (2) the tensor-core kernels round P (forward, dV) and dS (dQ, dK) to 16 bits before the
// second product: each term of Σ_j P_ij v_j moves by at most u·P_ij·|v_j|, so the sum by at
// most u·max|v| (rows of P sum to 1), and for the gradients by u times sums of |terms|, which
// for these inputs stay within a few times the result's own magnitude. Both together:
// u·(4·scale + 4), the +4 covering outputs near 0 whose terms are not (|v| ≤ 4 for N(0,1)
// inputs of these sizes). Accumulation in float32 adds ~1e-6 relative, negligible beside u.
inline double tolerance_for(const Case& c, double scale) {
  if (c.precision == kFp32) return 2e-4;
  return unit_roundoff(c.precision) * (4 * scale + 4);
}

struct Inputs {
  std::vector<float> q, k, v, w;  // w: the loss is sum(out * w), so grad_out = w
};

// Normal inputs, rounded to the case's 16-bit format so the reference sees what the kernel sees.
inline Inputs random_inputs(const Case& c, int bh) {
  const size_t n = static_cast<size_t>(bh) * c.t * c.d;
  std::mt19937 gen(5);
  std::normal_distribution<float> normal;
  auto random = [&] {
    std::vector<float> x(n);
    for (auto& e : x) e = normal(gen);
    if (c.precision == kBf16) {
      for (auto& e : x) e = __bfloat162float(__float2bfloat16(e));
    } else if (c.precision == kFp16) {
      for (auto& e : x) e = __half2float(__float2half(e));
    }
    return x;
  };
  Inputs in;
  in.q = random();
  in.k = random();
  in.v = random();
  in.w = random();
  return in;
}

inline double max_error(const std::vector<float>& got, const std::vector<double>& want) {
  double e = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;  // std::max would drop a NaN
    e = std::max(e, std::abs(got[i] - want[i]));
  }
  return e;
}

inline double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (const double e : x) m = std::max(m, std::abs(e));
  return m;
}

struct Reference {
  std::vector<double> out, dq, dk, dv;
};

// softmax(q kᵀ/√d) v and its gradients for the loss Σ out ∘ w, one batch-head at a time.
inline Reference naive(const std::vector<float>& q, const std::vector<float>& k,
                       const std::vector<float>& v, const std::vector<float>& w, int bh, int t,
                       int d, bool causal) {
  Reference r{std::vector<double>(q.size()), std::vector<double>(q.size()),
              std::vector<double>(q.size()), std::vector<double>(q.size())};
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (int b = 0; b < bh; ++b) {
    const size_t o = static_cast<size_t>(b) * t * d;
    std::vector<double> p(static_cast<size_t>(t) * t, 0.0);
    for (int i = 0; i < t; ++i) {
      double max = -INFINITY, sum = 0;
      std::vector<double> s(t, -INFINITY);
      for (int j = 0; j < t && (!causal || j <= i); ++j) {
        s[j] = 0;
        for (int c = 0; c < d; ++c) s[j] += q[o + i * d + c] * k[o + j * d + c];
        s[j] *= scale;
        max = std::max(max, s[j]);
      }
      for (int j = 0; j < t; ++j) sum += std::isinf(s[j]) ? 0 : std::exp(s[j] - max);
      for (int j = 0; j < t; ++j) p[i * t + j] = std::isinf(s[j]) ? 0 : std::exp(s[j] - max) / sum;
      for (int c = 0; c < d; ++c) {
        for (int j = 0; j < t; ++j) r.out[o + i * d + c] += p[i * t + j] * v[o + j * d + c];
      }
    }
    for (int i = 0; i < t; ++i) {
      std::vector<double> dp(t, 0.0);
      double delta = 0;
      for (int j = 0; j < t; ++j) {
        for (int c = 0; c < d; ++c) dp[j] += w[o + i * d + c] * v[o + j * d + c];
        delta += p[i * t + j] * dp[j];
      }
      for (int j = 0; j < t; ++j) {
        const double ds = p[i * t + j] * (dp[j] - delta);
        for (int c = 0; c < d; ++c) {
          r.dv[o + j * d + c] += p[i * t + j] * w[o + i * d + c];
          r.dq[o + i * d + c] += ds * k[o + j * d + c] * scale;
          r.dk[o + j * d + c] += ds * q[o + i * d + c] * scale;
        }
      }
    }
  }
  return r;
}

}  // namespace ddpd::kernels::cuda
