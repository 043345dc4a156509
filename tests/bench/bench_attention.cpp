// Attention forward+backward time and peak memory, naive vs the tiled (flash) CPU algorithm,
// against sequence length and head dimension. A benchmark: prints figures, asserts nothing.
//   build/bin/ddpd-bench-attention [max_seq (4096)]
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "ddpd/kernels/flash_attention.h"

namespace {

// Peak RSS since the last reset (VmHWM), bytes; reset by writing 5 to /proc/self/clear_refs.
long peak_rss_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6)) * 1024;
  }
  return 0;
}
long current_rss_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6)) * 1024;
  }
  return 0;
}
void reset_peak() { std::ofstream("/proc/self/clear_refs") << "5"; }

struct Figures {
  double ms;
  double extra_mb;  // peak RSS above the inputs during forward+backward
};

template <typename Attention>
Figures measure(int64_t t, int64_t d, Attention attention) {
  torch::manual_seed(0);
  auto q = torch::randn({1, 4, t, d}, torch::requires_grad());
  auto k = torch::randn({1, 4, t, d}, torch::requires_grad());
  auto v = torch::randn({1, 4, t, d}, torch::requires_grad());
  attention(q, k, v).sum().backward();  // warm-up
  const long before = current_rss_bytes();
  reset_peak();
  const auto start = std::chrono::steady_clock::now();
  const int reps = 3;
  for (int r = 0; r < reps; ++r) attention(q, k, v).sum().backward();
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() /
      reps;
  return {ms, (peak_rss_bytes() - before) / 1048576.0};
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t max_seq = argc > 1 ? std::stol(argv[1]) : 4096;
  at::set_num_threads(1);
  std::printf("batch 1, 4 heads, causal, fp32, 1 thread; forward+backward per call\n");
  std::printf("%6s %4s %12s %12s %12s %12s %8s\n", "seq", "d", "naive ms", "flash ms", "naive +MB",
              "flash +MB", "t ratio");
  for (int64_t d : {32, 64}) {
    for (int64_t t = 256; t <= max_seq; t *= 2) {
      auto naive = measure(t, d, [](auto& q, auto& k, auto& v) {
        return ddpd::kernels::naive_attention(q, k, v, true);
      });
      auto flash = measure(t, d, [](auto& q, auto& k, auto& v) {
        return ddpd::kernels::flash_attention(q, k, v, {true, 128, 128});
      });
      std::printf("%6ld %4ld %12.1f %12.1f %12.1f %12.1f %8.2f\n", static_cast<long>(t),
                  static_cast<long>(d), naive.ms, flash.ms, naive.extra_mb, flash.extra_mb,
                  flash.ms / naive.ms);
    }
  }
}
