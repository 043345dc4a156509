// The reference for the CUDA FlashAttention-2 kernels, shared by the GPU test and the emulated
// test: naive attention in double precision on the host, the shapes both run, and their inputs.
#pragma once

#include <cuda_bf16.h>

#include <gtest/gtest.h>
#include <algorithm>
#include <cmath>

#include <ostream>
#include <random>
#include <string>
#include <vector>

namespace ddpd::kernels::cuda {

// Lengths no tile divides (tiles are 64 query rows and 32 key rows), every head dim, causal and
// not, fp32 and bf16.
struct Case {
  int t, d;
  bool causal, bf16;
};
inline const std::vector<Case> kCases{
    {1, 32, true, false},    {77, 32, true, false}, {77, 64, false, false}, {130, 64, true, false},
    {130, 128, true, false}, {96, 64, true, true},  {65, 128, false, true}};
constexpr int kBatchHeads = 3;

// Test names show the case, not its bytes.
inline void PrintTo(const Case& c, std::ostream* os) {
  *os << "t=" << c.t << " d=" << c.d << (c.causal ? " causal" : "") << (c.bf16 ? " bf16" : " fp32");
}

// A GoogleTest parameter name: t77_d64_causal_fp32.
inline std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return "t" + std::to_string(c.t) + "_d" + std::to_string(c.d) + (c.causal ? "_causal" : "_full") +
         (c.bf16 ? "_bf16" : "_fp32");
}

inline double tolerance_for(const Case& c) { return c.bf16 ? 5e-2 : 2e-4; }

struct Inputs {
  std::vector<float> q, k, v, w;  // w: the loss is sum(out * w), so grad_out = w
};

// Normal inputs; for bf16 rounded to bf16, so the reference sees what the kernel sees.
inline Inputs random_inputs(const Case& c, int bh) {
  const size_t n = static_cast<size_t>(bh) * c.t * c.d;
  std::mt19937 gen(5);
  std::normal_distribution<float> normal;
  auto random = [&] {
    std::vector<float> x(n);
    for (auto& e : x) e = normal(gen);
    if (c.bf16) {
      for (auto& e : x) e = __bfloat162float(__float2bfloat16(e));
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
  for (size_t i = 0; i < got.size(); ++i) e = std::max(e, std::abs(got[i] - want[i]));
  return e;
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
