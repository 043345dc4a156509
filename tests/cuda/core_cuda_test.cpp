// The training core's CUDA path (built only with a CUDA LibTorch): the CUDA FlashAttention-2
// op against naive attention on the GPU, training on one GPU against the same job on the CPU,
// CUDA-event timelines, the caching allocator's figures and snapshot, bf16 autocast, NCCL
// collectives and, with two GPUs, a 2-rank NCCL job against one process. Every test skips
// with a message where no GPU is visible.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cuda/gpu_presence.h"
#include "ddpd/core/comm_bench.h"
#include "ddpd/core/communicator.h"
#include "ddpd/core/model.h"
#include "ddpd/core/rendezvous.h"
#include "ddpd/core/trainer.h"
#include "ddpd/kernels/flash_attention.h"
#include "device/device.h"
#include "flash_attention_cuda_op.h"
#include "support/process.h"

namespace ddpd::testing {
namespace {

std::shared_ptr<Communicator> single(at::Device device) {
  CommunicatorOptions options;
  options.timeout = std::chrono::milliseconds(60000);
  options.device = device;
  return std::make_shared<Communicator>(c10::intrusive_ptr<c10d::Backend>(), 0, 1, options);
}

DdpJobOptions tiny_job(Device device) {
  DdpJobOptions o;
  o.model = "tiny";
  o.batch_size = 4;
  o.context_length = 64;
  o.steps = 5;
  o.warmup_steps = 1;
  o.threads = 1;
  o.device = device;
  return o;
}

struct AttentionCase {
  int64_t t, d;
  bool causal;
  at::ScalarType dtype;
};

class FlashCudaOp : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(FlashCudaOp, MatchesNaiveAttentionValuesAndGradients) {
  REQUIRE_GPUS(1);
  const auto c = GetParam();
  torch::manual_seed(3);
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(c.dtype);
  auto make = [&] { return torch::randn({2, 3, c.t, c.d}, options).requires_grad_(true); };
  auto q = make(), k = make(), v = make();
  ASSERT_TRUE(kernels::cuda_kernels_take(q, k, v));
  auto w = torch::randn({2, 3, c.t, c.d}, options);
  auto out = kernels::flash_attention(q, k, v, {c.causal});
  (out.to(torch::kFloat32) * w.to(torch::kFloat32)).sum().backward();
  auto gq = q.grad().clone(), gk = k.grad().clone(), gv = v.grad().clone();
  // The reference in float32 from the same (possibly bf16-rounded) inputs.
  auto q32 = q.detach().to(torch::kFloat32).requires_grad_(true);
  auto k32 = k.detach().to(torch::kFloat32).requires_grad_(true);
  auto v32 = v.detach().to(torch::kFloat32).requires_grad_(true);
  auto ref = kernels::naive_attention(q32, k32, v32, c.causal);
  (ref * w.to(torch::kFloat32)).sum().backward();
  // About 8 units of the input dtype's rounding (u = 2^-8 bf16, 2^-11 fp16) at values of order 1.
  const double tol = c.dtype == torch::kBFloat16 ? 3e-2 : c.dtype == torch::kHalf ? 4e-3 : 1e-4;
  EXPECT_EQ(out.scalar_type(), c.dtype);
  EXPECT_LT((out.to(torch::kFloat32) - ref).abs().max().item<double>(), tol);
  EXPECT_LT((gq.to(torch::kFloat32) - q32.grad()).abs().max().item<double>(), 10 * tol);
  EXPECT_LT((gk.to(torch::kFloat32) - k32.grad()).abs().max().item<double>(), 10 * tol);
  EXPECT_LT((gv.to(torch::kFloat32) - v32.grad()).abs().max().item<double>(), 10 * tol);
}

INSTANTIATE_TEST_SUITE_P(Shapes, FlashCudaOp,
                         ::testing::Values(AttentionCase{1, 64, true, torch::kFloat32},
                                           AttentionCase{77, 32, true, torch::kFloat32},
                                           AttentionCase{130, 64, false, torch::kFloat32},
                                           AttentionCase{200, 128, true, torch::kHalf},
                                           AttentionCase{130, 64, true, torch::kBFloat16},
                                           AttentionCase{96, 128, false, torch::kBFloat16}),
                         [](const auto& info) {
                           const AttentionCase& c = info.param;
                           return "t" + std::to_string(c.t) + "_d" + std::to_string(c.d) +
                                  (c.causal ? "_causal" : "_full") +
                                  (c.dtype == torch::kBFloat16 ? "_bf16"
                                   : c.dtype == torch::kHalf   ? "_fp16"
                                                               : "_fp32");
                         });

// Head dims the kernels lack, and fp32 at head dim 128 (the scalar kernel spills there;
// kernels/README.md), take the tiled LibTorch path on the GPU, with the same values.
TEST(FlashCuda, OtherShapesFallBackToTheTiledPath) {
  REQUIRE_GPUS(1);
  for (int64_t d : {48, 128}) {
    auto q = torch::randn({1, 2, 50, d}, torch::kCUDA);
    EXPECT_FALSE(kernels::cuda_kernels_take(q, q, q)) << "d " << d;
    auto out = kernels::flash_attention(q, q, q, {true});
    EXPECT_LT((out - kernels::naive_attention(q, q, q, true)).abs().max().item<double>(), 1e-4);
  }
}

// One GPU trains the tiny job to the losses one CPU process reaches (same init and data:
// both are made on the CPU), within float reassociation.
TEST(CudaTrainer, OneGpuFollowsTheCpu) {
  REQUIRE_GPUS(1);
  const auto cpu = Trainer(tiny_job(Device::kCpu), single(at::kCPU)).run();
  const auto gpu = Trainer(tiny_job(Device::kCuda), single(at::Device(at::kCUDA, 0))).run();
  ASSERT_EQ(gpu.steps.size(), cpu.steps.size());
  for (size_t i = 0; i < cpu.steps.size(); ++i) {
    EXPECT_NEAR(gpu.steps[i].loss, cpu.steps[i].loss, 2e-3) << "step " << i;
  }
}

// The model's attentions on the GPU at head dim 64, where the CUDA kernels take flash (the tiny
// preset's head dim 16 falls back to the tiled LibTorch path) and sdpa is PyTorch's: the same
// weights and data reach the same losses as naive attention. bf16 autocast rounds each
// attention output to 8 significant bits (u = 2^-8) in any of them, and the loss moves by at
// most about u times its size through the output projection: 4 u of the loss allows for
// the steps' accumulation.
TEST(CudaTrainer, FlashAndSdpaFollowNaiveAtHeadDim64) {
  REQUIRE_GPUS(1);
  auto job = tiny_job(Device::kCuda);
  job.d_model = 128;
  job.num_heads = 2;
  job.precision = Precision::kBf16;
  const auto q =
      torch::zeros({1, 2, 8, 64}, torch::TensorOptions().device(at::kCUDA).dtype(torch::kBFloat16));
  ASSERT_TRUE(kernels::cuda_kernels_take(q, q, q)) << "the CUDA kernels must run in this test";
  job.attention = Attention::kNaive;
  const auto naive = Trainer(job, single(at::Device(at::kCUDA, 0))).run();
  for (Attention attention : {Attention::kFlash, Attention::kSdpa}) {
    job.attention = attention;
    const auto r = Trainer(job, single(at::Device(at::kCUDA, 0))).run();
    ASSERT_EQ(r.steps.size(), naive.steps.size());
    for (size_t i = 0; i < r.steps.size(); ++i) {
      const double bound = 4 * std::ldexp(1.0, -8) * naive.steps[i].loss;
      EXPECT_NEAR(r.steps[i].loss, naive.steps[i].loss, bound)
          << enum_name(attention) << ", step " << i;
    }
  }
}

// Phases come from CUDA events: each non-negative, in order, within the step; the allocator's
// peak covers at least the parameters, gradients and optimizer state.
TEST(CudaTrainer, EventTimelineAndAllocatorFigures) {
  REQUIRE_GPUS(1);
  auto options = tiny_job(Device::kCuda);
  options.attention = Attention::kFlash;
  const auto r = Trainer(options, single(at::Device(at::kCUDA, 0))).run();
  for (const auto& s : r.steps) {
    EXPECT_GT(s.step_seconds, 0);
    EXPECT_GT(s.forward_seconds, 0);
    EXPECT_GT(s.backward_seconds, 0);
    EXPECT_GE(s.optimizer_seconds, 0);
    EXPECT_LE(s.forward_seconds + s.backward_seconds + s.optimizer_seconds,
              s.step_seconds * 1.0001 + 1e-6);
    double last_end = 0;
    for (const auto& span : s.spans) {
      if (span.communication) continue;
      EXPECT_GE(span.end_unix_s, span.begin_unix_s) << span.name;
      EXPECT_GE(span.begin_unix_s + 1e-6, last_end) << span.name;
      last_end = span.end_unix_s;
    }
  }
  const auto& m = r.memory.after_step;
  EXPECT_GT(m.param_bytes, 0);
  EXPECT_GE(m.peak_bytes, m.param_bytes + m.grad_bytes + m.optimizer_state_bytes);
  const auto stats = detail::cuda_allocator_stats(at::Device(at::kCUDA, 0));
  EXPECT_GE(stats.peak_allocated, stats.allocated);
  EXPECT_GE(stats.reserved, stats.allocated);
  const auto snapshot = detail::cuda_memory_snapshot();
  ASSERT_FALSE(snapshot["segments"].empty());
  EXPECT_GT(snapshot["segments"][0]["total_size"].get<int64_t>(), 0);
}

// bf16 autocast with FP32 master weights: parameters stay float32 and the losses stay close to
// float32 training.
TEST(CudaTrainer, Bf16AutocastKeepsFp32WeightsAndTracksFp32) {
  REQUIRE_GPUS(1);
  auto options = tiny_job(Device::kCuda);
  const auto fp32 = Trainer(options, single(at::Device(at::kCUDA, 0))).run();
  options.precision = Precision::kBf16;
  Trainer trainer(options, single(at::Device(at::kCUDA, 0)));
  const auto bf16 = trainer.run();
  for (const auto& p : trainer.full_parameters()) EXPECT_EQ(p.scalar_type(), torch::kFloat32);
  for (size_t i = 0; i < fp32.steps.size(); ++i) {
    EXPECT_NEAR(bf16.steps[i].loss, fp32.steps[i].loss, 5e-2) << "step " << i;
  }
}

// ddpd-train --cuda-memory-snapshot writes the allocator's segments after the last step.
TEST(CudaTrainer, MemorySnapshotIsWritten) {
  REQUIRE_GPUS(1);
  const std::string path = temp_dir() + "/snapshot.json";
  const auto o = run_process({binary_dir() + "/ddpd-train", "--model", "tiny", "--steps", "2",
                              "--device", "cuda", "--cuda-memory-snapshot", path},
                             {}, std::chrono::seconds(120));
  ASSERT_EQ(o.exit_code, 0) << o.err;
  std::ifstream in(path);
  const auto snapshot = nlohmann::json::parse(in);
  EXPECT_EQ(snapshot["rank"], 0);
  ASSERT_FALSE(snapshot["segments"].empty());
  int64_t allocated = 0;
  for (const auto& s : snapshot["segments"]) allocated += s["allocated_size"].get<int64_t>();
  EXPECT_GT(allocated, 4 * count_parameters(model_preset("tiny")));  // at least the weights
}

// The communicator refuses a job whose device does not match its own.
TEST(CudaTrainer, DeviceMismatchIsRefused) {
  REQUIRE_GPUS(1);
  EXPECT_THROW(Trainer(tiny_job(Device::kCpu), single(at::Device(at::kCUDA, 0))), OptionError);
}

// Two GPUs: 2-rank NCCL jobs (ddpd-train, real processes) follow one process on one GPU, for
// the bucketed all-reduce, FSDP (all-gather and reduce-scatter) and ZeRO-1 (broadcasts).
class CudaNccl : public ::testing::TestWithParam<std::vector<std::string>> {};

TEST_P(CudaNccl, TwoRanksFollowOneProcess) {
  REQUIRE_GPUS(2);
  std::vector<std::string> argv{binary_dir() + "/ddpd-train",
                                "--model",
                                "tiny",
                                "--batch",
                                "4",
                                "--context",
                                "64",
                                "--steps",
                                "5",
                                "--device",
                                "cuda"};
  const auto& extra = GetParam();
  argv.insert(argv.end(), extra.begin(), extra.end());
  const auto one = run_process(argv, {}, std::chrono::seconds(120));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const auto two = run_ranks(argv, 2, std::chrono::seconds(180));
  ASSERT_EQ(two[0].exit_code, 0) << two[0].err;
  ASSERT_EQ(two[1].exit_code, 0) << two[1].err;
  const auto a = nlohmann::json::parse(one.out), b = nlohmann::json::parse(two[0].out);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_NEAR(b["steps"][i]["loss"].get<double>(), a["steps"][i]["loss"].get<double>(), 2e-3);
  }
  EXPECT_LT(b["summary"]["max_param_spread"].get<double>(), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, CudaNccl,
    ::testing::Values(std::vector<std::string>{"--strategy", "bucketed", "--bucket-mb", "0.05"},
                      std::vector<std::string>{"--strategy", "fsdp"},
                      std::vector<std::string>{"--strategy", "overlap", "--shard-optimizer"}),
    [](const auto& info) {
      std::string name = info.param[1];  // the strategy
      for (const auto& flag : info.param) {
        if (flag == "--shard-optimizer") name += "_zero1";
      }
      return name;
    });

// Two GPUs, two ranks as threads of this process: the NCCL comm benchmark checks every
// collective's values, sizes not divisible by the world size included.
TEST(CudaNcclComm, EveryCollectivePassesItsDataCheck) {
  REQUIRE_GPUS(2);
  CommBenchOptions options;
  options.collectives = {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                         Collective::kBroadcast};
  options.sizes_bytes = {4096, (1 << 20) + 4, 16 << 20};
  options.warmup = 1;
  options.iters = 3;
  const int port = unused_port();
  std::vector<CommBenchResult> results(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      try {
        RendezvousOptions rendezvous;
        rendezvous.master_port = port;
        rendezvous.rank = r;
        rendezvous.world_size = 2;
        rendezvous.local_rank = r;
        rendezvous.backend = Backend::kNccl;
        rendezvous.timeout = std::chrono::milliseconds(60000);
        results[r] = run_comm_benchmark(options, *connect(rendezvous));
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : ranks) t.join();
  ASSERT_EQ(errors[0], "");
  ASSERT_EQ(errors[1], "");
  ASSERT_EQ(results[0].rows.size(), 12u);
  for (const auto& row : results[0].rows) {
    EXPECT_TRUE(row.data_ok) << enum_name(row.collective) << " " << row.size_bytes;
    EXPECT_GT(row.busbw_bytes_per_s, 0) << enum_name(row.collective) << " " << row.size_bytes;
  }
}

// The comm benchmark keeps its buffers on the GPU, checks their values there and times each
// iteration with CUDA events (one rank: every collective is a device copy).
TEST(CudaComm, BuffersLiveOnTheGpuAndAreChecked) {
  REQUIRE_GPUS(1);
  CommBenchOptions options;
  options.collectives = {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                         Collective::kBroadcast};
  options.sizes_bytes = {1 << 20, 16 << 20};
  options.warmup = 1;
  options.iters = 3;
  const auto result = run_comm_benchmark(options, *single(at::Device(at::kCUDA, 0)));
  ASSERT_EQ(result.rows.size(), 8u);
  for (const auto& row : result.rows) {
    EXPECT_TRUE(row.data_ok) << enum_name(row.collective);
    EXPECT_GE(row.time_s, 0) << enum_name(row.collective);
  }
}

}  // namespace
}  // namespace ddpd::testing
