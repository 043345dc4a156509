// Shared pieces of the multi-rank suites: run the helper as N real ranks, load its tensors.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "support/process.h"

namespace ddpd::testing {

inline std::string rank_helper() { return binary_dir() + "/ddpd-test-rank"; }

// The equivalence suites verify in float64 (ddpd-test-rank --float64, as PyTorch's DDP tests use
// model.double()): N ranks and one process sum the same terms in different orders, and in float32
// that noise, amplified by AdamW's normalised update in near-zero gradient components, reached
// 1.2e-5 relative in gradients and 1.24e-4 in parameters on one AMD EPYC, past bounds tuned on
// another CPU. float64's unit roundoff is 2^-29 (1.9e-9) of float32's, so the same runs move by
// about 2.3e-14 and 2.3e-13. The bounds below keep a margin of over 4000 for other CPUs'
// kernels, and stay 10^7 below what a real fault moves: a sum not divided by N is off by a factor
// of N, a lost bucket or a skipped step moves a parameter by about one step of lr (1e-2).
inline const std::string kFloat64Flag = "--float64";
constexpr int64_t kFloat64Bytes = 8;
constexpr double kGradientRelativeBound = 1e-10;  // relative to the largest gradient
constexpr double kParameterBound = 1e-9;          // absolute, after several AdamW steps

// The transport multi-rank runs use: DDPD_TEST_TRANSPORT (CTest sets it to gloo for the suites
// registered a second time under the Gloo. prefix), else the product's default (auto: shared
// memory, as every rank runs on this host).
inline const std::string& test_transport() {
  static const std::string transport = [] {
    const char* value = std::getenv("DDPD_TEST_TRANSPORT");
    return std::string(value ? value : "");
  }();
  return transport;
}

// Appends --transport test_transport() to a rank command line, when one is set.
inline void with_test_transport(std::vector<std::string>& argv) {
  if (!test_transport().empty()) argv.insert(argv.end(), {"--transport", test_transport()});
}

inline std::vector<torch::Tensor> load_tensors(const std::string& path) {
  std::vector<torch::Tensor> tensors;
  torch::load(tensors, path);
  return tensors;
}

inline nlohmann::json load_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// Runs `ddpd-test-rank MODE` with `args` as `world` ranks (world 1: no WORLD_SIZE, a plain
// single process). Every rank must exit 0. Returns the output prefix.
inline std::string run_helper(const std::string& name, std::vector<std::string> args, int world,
                              const std::string& mode = "train") {
  const std::string prefix = temp_dir() + "/" + name + "-w" + std::to_string(world);
  std::vector<std::string> argv{rank_helper(), mode,        "--out", prefix,      "--model",
                                "tiny",        "--context", "16",    "--threads", "1"};
  argv.insert(argv.end(), args.begin(), args.end());
  if (world > 1) with_test_transport(argv);
  std::vector<ProcessOutcome> outcomes;
  if (world == 1) {
    outcomes.push_back(run_process(argv, {}, std::chrono::seconds(120)));
  } else {
    outcomes = run_ranks(argv, world, std::chrono::seconds(120));
  }
  for (size_t r = 0; r < outcomes.size(); ++r) {
    EXPECT_EQ(outcomes[r].exit_code, 0) << name << " rank " << r << " stderr:\n" << outcomes[r].err;
  }
  return prefix;
}

// `flags` followed by `more`.
inline std::vector<std::string> with(std::vector<std::string> flags,
                                     const std::vector<std::string>& more) {
  flags.insert(flags.end(), more.begin(), more.end());
  return flags;
}

inline std::string rank_file(const std::string& prefix, int rank, const std::string& what) {
  return prefix + ".rank" + std::to_string(rank) + "." + what;
}

// The loss of every step, as rank 0's report lists them.
inline std::vector<double> rank0_losses(const std::string& prefix) {
  std::vector<double> out;
  const nlohmann::json report = load_json(rank_file(prefix, 0, "json"));
  for (const auto& s : report["result"]["steps"]) out.push_back(s["loss"].get<double>());
  return out;
}

// Largest |a - b| over all elements of two tensor lists of the same shapes.
inline double max_abs_diff(const std::vector<torch::Tensor>& a,
                           const std::vector<torch::Tensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    EXPECT_EQ(a[i].sizes(), b[i].sizes()) << "tensor " << i;
    if (a[i].sizes() != b[i].sizes()) return INFINITY;
    const double diff = (a[i] - b[i]).abs().max().item<double>();
    if (std::isnan(diff)) return INFINITY;  // std::max would drop it
    worst = std::max(worst, diff);
  }
  return worst;
}

// Step `step`'s averaged gradients as rank `rank` saved them, as full tensors: fsdp ranks hold
// shards, so theirs are concatenated over the `world` ranks and the padding dropped.
inline std::vector<torch::Tensor> full_gradients(const std::string& prefix, int rank, int step,
                                                 const std::string& strategy, int world) {
  const std::string file = "grads" + std::to_string(step) + ".pt";
  auto grads = load_tensors(rank_file(prefix, rank, file));
  if (strategy != "fsdp") return grads;
  std::vector<std::vector<torch::Tensor>> shards;
  for (int r = 0; r < world; ++r) shards.push_back(load_tensors(rank_file(prefix, r, file)));
  const auto shapes = load_tensors(rank_file(prefix, rank, "init_synced.pt"));
  std::vector<torch::Tensor> full;
  for (size_t i = 0; i < grads.size(); ++i) {
    std::vector<torch::Tensor> pieces;
    for (auto& s : shards) pieces.push_back(s[i]);
    full.push_back(torch::cat(pieces).narrow(0, 0, shapes[i].numel()).view(shapes[i].sizes()));
  }
  return full;
}

// Largest |a - b| relative to the largest |b| over all tensors.
inline double max_relative_diff(const std::vector<torch::Tensor>& a,
                                const std::vector<torch::Tensor>& b) {
  double scale = 0;
  for (const auto& t : b) scale = std::max(scale, t.abs().max().item<double>());
  return max_abs_diff(a, b) / std::max(scale, 1e-30);
}

}  // namespace ddpd::testing
