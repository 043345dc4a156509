// FlashAttention-2 (ddpd's CUDA kernels, --attention flash) against PyTorch's
// scaled_dot_product_attention (--attention sdpa: cuDNN's or flash's kernel, as PyTorch picks) on
// one GPU, causal, forward+backward. For each dtype, sequence length and head dim it prints:
//  - milliseconds per forward call and per forward+backward call of each (CUDA events, mean of
//    --reps after two warm-up calls, batch x heads of --batch x --heads), and flash / sdpa;
//  - the largest error of each against a float64 reference (naive attention in float64 on the
//    GPU, autograd for the gradients), over out, dq, dk and dv, relative to the largest
//    reference value of each, on 1 x 4 heads of the same length;
//  - which path flash took: the CUDA kernels, or the tiled LibTorch fallback.
// A benchmark: prints figures, asserts nothing. Needs a GPU (exit 2 without one).
//   ddpd-bench-flash-sdpa [--seqs 1024,2048,4096] [--head-dims 64,128] [--dtypes fp32,bf16]
//                         [--batch 4] [--heads 16] [--reps 10] [--json]
#include <torch/torch.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "ddpd/kernels/flash_attention.h"
#include "device/device.h"
#include "flash_attention_cuda_op.h"
#include "support/relative_error.h"

namespace {

using ddpd::testing::relative_error;  // max |x - ref| / max |ref|

using AttentionFn =
    std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&)>;

struct Settings {
  std::vector<int64_t> seqs{1024, 2048, 4096};
  std::vector<int64_t> head_dims{64, 128};
  std::vector<std::string> dtypes{"fp32", "bf16"};
  int64_t batch = 4;
  int64_t heads = 16;
  int reps = 10;
  bool json = false;
};

torch::ScalarType scalar_type(const std::string& name) {
  if (name == "bf16") return torch::kBFloat16;
  if (name == "fp16") return torch::kHalf;
  return torch::kFloat32;
}

torch::Tensor flash(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  return ddpd::kernels::flash_attention(q, k, v, {/*causal=*/true});
}

torch::Tensor sdpa(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
}

// Largest relative error of `fn`'s out, dq, dk, dv against float64 naive attention.
double error_against_float64(const AttentionFn& fn, int64_t t, int64_t d, torch::ScalarType dtype) {
  const auto options = torch::TensorOptions().device(at::kCUDA).dtype(torch::kDouble);
  torch::manual_seed(1);
  std::vector<torch::Tensor> exact;
  for (int i = 0; i < 4; ++i) exact.push_back(torch::randn({1, 4, t, d}, options));
  auto reference = [&](const AttentionFn& f, torch::ScalarType type) {
    std::vector<torch::Tensor> in;
    for (int i = 0; i < 3; ++i) in.push_back(exact[i].to(type).detach().requires_grad_(true));
    auto out = f(in[0], in[1], in[2]);
    out.backward(exact[3].to(type));
    return std::vector<torch::Tensor>{out.detach(), in[0].grad(), in[1].grad(), in[2].grad()};
  };
  const auto ref =
      reference([](const auto& q, const auto& k,
                   const auto& v) { return ddpd::kernels::naive_attention(q, k, v, true); },
                torch::kDouble);
  const auto got = reference(fn, dtype);
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, relative_error(got[i], ref[i]));
  return worst;
}

// Milliseconds per call of `fn` on batch x heads: forward+backward, or forward alone.
double milliseconds(const AttentionFn& fn, const Settings& s, int64_t t, int64_t d,
                    torch::ScalarType dtype, bool backward, ddpd::detail::Timeline& timeline) {
  const auto options = torch::TensorOptions().device(at::kCUDA).dtype(dtype).requires_grad(true);
  torch::manual_seed(0);
  auto q = torch::randn({s.batch, s.heads, t, d}, options);
  auto k = torch::randn({s.batch, s.heads, t, d}, options);
  auto v = torch::randn({s.batch, s.heads, t, d}, options);
  const auto grad = torch::randn({s.batch, s.heads, t, d}, options.requires_grad(false));
  auto call = [&] {
    if (backward) {
      fn(q, k, v).backward(grad);
    } else {
      torch::NoGradGuard no_grad;
      fn(q, k, v);
    }
  };
  for (int i = 0; i < 2; ++i) call();
  timeline.synchronize();
  timeline.anchor();
  const auto start = timeline.mark();
  for (int r = 0; r < s.reps; ++r) call();
  const auto end = timeline.mark();
  return (timeline.seconds(end) - timeline.seconds(start)) * 1e3 / s.reps;
}

struct Row {
  std::string dtype, path;
  int64_t t = 0, d = 0;
  double flash_ms = -1, sdpa_ms = -1, flash_error = -1, sdpa_error = -1;
  double flash_forward_ms = -1, sdpa_forward_ms = -1;
  std::string failure;  // a c10::Error's first line, when a measurement failed
};

Row measure(const Settings& s, const std::string& dtype_name, int64_t t, int64_t d,
            ddpd::detail::Timeline& timeline) {
  Row row{dtype_name, "", t, d};
  const auto dtype = scalar_type(dtype_name);
  const auto probe =
      torch::zeros({1, 1, 1, d}, torch::TensorOptions().device(at::kCUDA).dtype(dtype));
  row.path = ddpd::kernels::cuda_kernels_take(probe, probe, probe) ? "cuda-kernels" : "tiled";
  try {
    row.flash_error = error_against_float64(flash, t, d, dtype);
    row.sdpa_error = error_against_float64(sdpa, t, d, dtype);
    row.flash_forward_ms = milliseconds(flash, s, t, d, dtype, false, timeline);
    row.sdpa_forward_ms = milliseconds(sdpa, s, t, d, dtype, false, timeline);
    row.flash_ms = milliseconds(flash, s, t, d, dtype, true, timeline);
    row.sdpa_ms = milliseconds(sdpa, s, t, d, dtype, true, timeline);
  } catch (const c10::Error& e) {
    row.failure = e.msg().substr(0, e.msg().find('\n'));
  }
  return row;
}

void print(const Row& r, bool json) {
  if (json) {
    std::cout << nlohmann::json{{"dtype", r.dtype},
                                {"seq", r.t},
                                {"head_dim", r.d},
                                {"flash_path", r.path},
                                {"flash_ms", r.flash_ms},
                                {"sdpa_ms", r.sdpa_ms},
                                {"flash_forward_ms", r.flash_forward_ms},
                                {"sdpa_forward_ms", r.sdpa_forward_ms},
                                {"flash_max_rel_error", r.flash_error},
                                {"sdpa_max_rel_error", r.sdpa_error},
                                {"failure", r.failure}}
                     .dump()
              << std::endl;
    return;
  }
  if (!r.failure.empty()) {
    std::printf("%-5s %6ld %4ld  FAILED: %s\n", r.dtype.c_str(), static_cast<long>(r.t),
                static_cast<long>(r.d), r.failure.c_str());
    return;
  }
  std::printf("%-5s %6ld %4ld %12s %8.3f %8.3f %6.2f %8.3f %8.3f %6.2f %10.2e %10.2e\n",
              r.dtype.c_str(), static_cast<long>(r.t), static_cast<long>(r.d), r.path.c_str(),
              r.flash_forward_ms, r.sdpa_forward_ms, r.flash_forward_ms / r.sdpa_forward_ms,
              r.flash_ms, r.sdpa_ms, r.flash_ms / r.sdpa_ms, r.flash_error, r.sdpa_error);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  CLI::App app{"FlashAttention-2 (ddpd) against PyTorch SDPA on one GPU"};
  app.add_option("--seqs", s.seqs, "Sequence lengths")->delimiter(',');
  app.add_option("--head-dims", s.head_dims, "Head dimensions")->delimiter(',');
  app.add_option("--dtypes", s.dtypes, "fp32, bf16, fp16")
      ->delimiter(',')
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app.add_option("--batch", s.batch, "Batch (timing)")->capture_default_str();
  app.add_option("--heads", s.heads, "Heads (timing)")->capture_default_str();
  app.add_option("--reps", s.reps, "Timed calls per point")->capture_default_str();
  app.add_flag("--json", s.json, "One JSON object per point instead of the table");
  CLI11_PARSE(app, argc, argv);
  at::Device device = at::kCPU;
  try {
    device = ddpd::detail::bind_cuda_device(0);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  auto timeline = ddpd::detail::make_timeline(device, [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  });
  if (!s.json) {
    std::printf("causal, forward+backward; timing on %ld x %ld heads, errors on 1 x 4 heads\n",
                static_cast<long>(s.batch), static_cast<long>(s.heads));
    std::printf("%-5s %6s %4s %12s %8s %8s %6s %8s %8s %6s %10s %10s\n", "dtype", "seq", "d",
                "flash path", "fa fwd", "sdpa fwd", "ratio", "fa f+b", "sdpa f+b", "ratio",
                "fa error", "sdpa error");
  }
  for (const auto& dtype : s.dtypes) {
    for (int64_t d : s.head_dims) {
      for (int64_t t : s.seqs) print(measure(s, dtype, t, d, *timeline), s.json);
    }
  }
}
