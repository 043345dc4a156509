#include <gtest/gtest.h>

#include <cmath>

#include "ddpd/common/job_options.h"
#include "ddpd/core/comm_bench.h"

namespace ddpd {
namespace {

TEST(CommOptions, BusBandwidthFactorsAreNcclTests) {
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::kAllReduce, 2), 1.0);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::kAllReduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::kAllReduce, 6), 2.0 * 5 / 6);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::kAllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::kReduceScatter, 6), 5.0 / 6);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::kBroadcast, 6), 1.0);
  EXPECT_EQ(parse_enum<Collective>("reduce_scatter"), Collective::kReduceScatter);
  EXPECT_EQ(enum_name(Collective::kAllGather), "all_gather");
}

TEST(CommOptions, SizesUseBinaryUnits) {
  EXPECT_EQ(parse_size("1MB"), 1 << 20);
  EXPECT_EQ(parse_size("512KB"), 512 << 10);
  EXPECT_EQ(parse_size("1GB"), int64_t{1} << 30);
  EXPECT_EQ(parse_size("4096B"), 4096);
  EXPECT_EQ(parse_size("4096"), 4096);
  EXPECT_EQ(parse_size("0.5MB"), 1 << 19);
  EXPECT_EQ(parse_sizes("1MB,10MB"), (std::vector<int64_t>{1 << 20, 10 << 20}));
}

std::string flag_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const OptionError& e) {
    return e.flag();
  }
  return "";
}

TEST(CommOptions, BadInputNamesTheFlag) {
  EXPECT_EQ(flag_of([] { parse_size("1XB"); }), "--sizes");
  EXPECT_EQ(flag_of([] { parse_size("MB"); }), "--sizes");
  EXPECT_EQ(flag_of([] { parse_size("16GB"); }), "--sizes");
  EXPECT_EQ(flag_of([] { parse_sizes("1MB,,2MB"); }), "--sizes");
  EXPECT_EQ(flag_of([] { parse_enum<Collective>("gossip"); }), "--collective");
  EXPECT_EQ(flag_of([] { parse_enum<CommDtype>("float16"); }), "--dtype");
  CommBenchOptions o;
  o.collectives = {};
  EXPECT_EQ(flag_of([&] { validate(o); }), "--collective");
  o = {};
  o.iters = 0;
  EXPECT_EQ(flag_of([&] { validate(o); }), "--iters");
  o = {};
  o.sizes_bytes = {2};
  EXPECT_EQ(flag_of([&] { validate(o); }), "--sizes");
}

TEST(CommOptions, FitRecoversKnownAlphaAndBeta) {
  // t = 50 us + S / 2 GB/s, with +-1% alternating noise.
  const double alpha = 50e-6, beta = 2e9;
  std::vector<int64_t> sizes{1 << 20, 10 << 20, 100 << 20, int64_t{1} << 30, 1 << 16};
  std::vector<double> times;
  for (size_t i = 0; i < sizes.size(); ++i) {
    times.push_back((alpha + sizes[i] / beta) * (i % 2 ? 1.01 : 0.99));
  }
  const auto fit = fit_latency_bandwidth(sizes, times);
  EXPECT_NEAR(fit.alpha_s, alpha, 0.05 * alpha);
  EXPECT_NEAR(fit.beta_bytes_per_s, beta, 0.02 * beta);
  EXPECT_LT(fit.rms_relative_error, 0.015);
  // Exact data: exact fit.
  std::vector<double> exact;
  for (auto s : sizes) exact.push_back(alpha + s / beta);
  const auto perfect = fit_latency_bandwidth(sizes, exact);
  EXPECT_NEAR(perfect.alpha_s, alpha, 1e-12);
  EXPECT_NEAR(perfect.beta_bytes_per_s, beta, 1e-3 * beta);
}

TEST(CommOptions, FitStaysPhysicalOnNoisyData) {
  // The smallest size measured slowest: an unconstrained fit would give a negative bandwidth
  // term. The fit keeps alpha >= 0 and a finite, positive beta.
  const auto fit = fit_latency_bandwidth({4096, 1 << 20, 3 << 20}, {3e-3, 1e-3, 2.5e-3});
  EXPECT_GE(fit.alpha_s, 0);
  EXPECT_GT(fit.beta_bytes_per_s, 0);
  EXPECT_TRUE(std::isfinite(fit.beta_bytes_per_s));
}

TEST(CommCheck, CatchesAWrongSum) {
  auto t = at::full({1000}, 3.0);
  EXPECT_TRUE(values_equal(t, 3.0));
  t[417] = 2.0;  // one element short, as a dropped contribution would leave it
  EXPECT_FALSE(values_equal(t, 3.0));
  EXPECT_FALSE(values_equal(at::full({10}, 3.0, at::kBFloat16), 4.0));
}

}  // namespace
}  // namespace ddpd
