// Attention forward+backward time and peak memory, naive vs flash (the tiled algorithm on CPU;
// the CUDA kernels on a GPU in CUDA builds), against sequence length and head dimension, up to
// where naive attention runs out of memory. A benchmark: prints figures, asserts nothing.
//   build/bin/ddpd-bench-attention [--device cpu|cuda] [--max-seq 4096] [--head-dims 32,64]
//                                  [--dtype fp32|bf16] [--batch 1] [--heads 4] [--json]
// Memory is the peak above the inputs: the caching allocator's peak on CUDA, peak RSS on CPU.
#include <torch/torch.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>

#include "ddpd/kernels/flash_attention.h"
#include "device/device.h"

namespace {

// Peak RSS since the last reset (VmHWM), bytes; reset by writing 5 to /proc/self/clear_refs.
long rss_field(const char* field) {
  std::ifstream status("/proc/self/status");
  const std::string prefix = std::string(field) + ":";
  for (std::string line; std::getline(status, line);) {
    if (line.rfind(prefix, 0) == 0) return std::stol(line.substr(prefix.size())) * 1024;
  }
  return 0;
}

struct Settings {
  std::string device = "cpu";
  std::string dtype = "fp32";
  int64_t max_seq = 4096;
  int64_t batch = 1;
  int64_t heads = 4;
  std::vector<int64_t> head_dims{32, 64};
  int reps = 3;
  bool json = false;
};

struct Figures {
  double ms = 0;
  double extra_mb = 0;
};

class Meter {
 public:
  explicit Meter(at::Device device)
      : device_(device), timeline_(ddpd::detail::make_timeline(device, [this] { return now(); })) {}

  // Forward + backward of `attention`, mean of `reps` after one warm-up call; nullopt when the
  // device runs out of memory.
  template <typename Attention>
  std::optional<Figures> measure(const Settings& s, int64_t t, int64_t d, Attention attention) {
    const auto options = torch::TensorOptions()
                             .device(device_)
                             .dtype(s.dtype == "bf16" ? torch::kBFloat16 : torch::kFloat32)
                             .requires_grad(true);
    try {
      torch::manual_seed(0);
      auto q = torch::randn({s.batch, s.heads, t, d}, options);
      auto k = torch::randn({s.batch, s.heads, t, d}, options);
      auto v = torch::randn({s.batch, s.heads, t, d}, options);
      attention(q, k, v).sum().backward();  // warm-up
      timeline_->synchronize();
      const double before = memory_now();
      reset_peak();
      timeline_->anchor();
      const auto start = timeline_->mark();
      for (int r = 0; r < s.reps; ++r) attention(q, k, v).sum().backward();
      const auto end = timeline_->mark();
      const double ms = (timeline_->seconds(end) - timeline_->seconds(start)) * 1e3 / s.reps;
      return Figures{ms, (memory_peak() - before) / 1048576.0};
    } catch (const c10::Error& e) {
      if (std::string(e.what()).find("out of memory") == std::string::npos) throw;
      timeline_->synchronize();
      return std::nullopt;
    }
  }

 private:
  double now() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  double memory_now() const {
    return device_.is_cuda() ? ddpd::detail::cuda_allocator_stats(device_).allocated
                             : rss_field("VmRSS");
  }
  double memory_peak() const {
    return device_.is_cuda() ? ddpd::detail::cuda_allocator_stats(device_).peak_allocated
                             : rss_field("VmHWM");
  }
  void reset_peak() {
    if (device_.is_cuda()) {
      ddpd::detail::reset_cuda_peak_stats(device_);
    } else {
      std::ofstream("/proc/self/clear_refs") << "5";
    }
  }

  at::Device device_;
  std::unique_ptr<ddpd::detail::Timeline> timeline_;
};

std::string cell(const std::optional<Figures>& f, bool memory) {
  if (!f) return "OOM";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", memory ? f->extra_mb : f->ms);
  return buf;
}

nlohmann::json figures_json(const std::optional<Figures>& f) {
  if (!f) return {{"oom", true}};
  return {{"ms", f->ms}, {"extra_mb", f->extra_mb}};
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  CLI::App app{"Attention forward+backward: naive vs flash"};
  app.add_option("--device", s.device, "cpu or cuda")->capture_default_str();
  app.add_option("--dtype", s.dtype, "fp32 or bf16")->capture_default_str();
  app.add_option("--max-seq", s.max_seq, "Longest sequence (from 256, doubling)")
      ->capture_default_str();
  app.add_option("--batch", s.batch, "Batch")->capture_default_str();
  app.add_option("--heads", s.heads, "Heads")->capture_default_str();
  app.add_option("--head-dims", s.head_dims, "Head dimensions")->delimiter(',');
  app.add_option("--reps", s.reps, "Timed calls per point")->capture_default_str();
  app.add_flag("--json", s.json, "One JSON object per point instead of the table");
  CLI11_PARSE(app, argc, argv);
  if (s.device != "cpu" && s.device != "cuda") {
    std::fprintf(stderr, "error: --device: expected cpu or cuda\n");
    return 2;
  }
  if (s.dtype != "fp32" && s.dtype != "bf16") {
    std::fprintf(stderr, "error: --dtype: expected fp32 or bf16\n");
    return 2;
  }
  at::Device device = at::kCPU;
  try {
    if (s.device == "cuda") device = ddpd::detail::bind_cuda_device(0);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  if (device.is_cpu()) at::set_num_threads(1);
  Meter meter(device);
  if (!s.json) {
    std::printf("%s, %s, batch %ld, %ld heads, causal; forward+backward per call%s\n",
                s.device.c_str(), s.dtype.c_str(), static_cast<long>(s.batch),
                static_cast<long>(s.heads), device.is_cpu() ? ", 1 thread" : "");
    std::printf("%6s %4s %12s %12s %12s %12s %8s\n", "seq", "d", "naive ms", "flash ms",
                "naive +MB", "flash +MB", "t ratio");
  }
  for (int64_t d : s.head_dims) {
    bool naive_fits = true;
    for (int64_t t = 256; t <= s.max_seq; t *= 2) {
      std::optional<Figures> naive;
      if (naive_fits) {
        naive = meter.measure(s, t, d, [](auto& q, auto& k, auto& v) {
          return ddpd::kernels::naive_attention(q, k, v, true);
        });
        naive_fits = naive.has_value();  // longer sequences only need more
      }
      auto flash = meter.measure(s, t, d, [](auto& q, auto& k, auto& v) {
        return ddpd::kernels::flash_attention(q, k, v, {true, 128, 128});
      });
      if (s.json) {
        std::cout << nlohmann::json{{"device", s.device},
                                    {"dtype", s.dtype},
                                    {"seq", t},
                                    {"head_dim", d},
                                    {"naive", figures_json(naive)},
                                    {"flash", figures_json(flash)}}
                         .dump()
                  << std::endl;
        continue;
      }
      const std::string ratio =
          naive && flash ? std::to_string(flash->ms / naive->ms).substr(0, 5) : "-";
      std::printf("%6ld %4ld %12s %12s %12s %12s %8s\n", static_cast<long>(t), static_cast<long>(d),
                  cell(naive, false).c_str(), cell(flash, false).c_str(), cell(naive, true).c_str(),
                  cell(flash, true).c_str(), ratio.c_str());
    }
  }
}
