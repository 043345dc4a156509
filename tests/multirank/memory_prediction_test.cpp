// `ddpctl plan memory`'s prediction (common/memory_estimate.h) against the peak the allocator
// measures (memory.step_peak_tensor_bytes): the bench model's shape (tests/bench/bench_config.sh)
// at world 1 to 4 under every strategy, ± ZeRO-1, ± --shard-replicas, with activation
// checkpointing, over shm and Gloo. Real ranks (ddpd-worker run ddp), two steps each, at a small
// context so the whole suite takes seconds per case. The table in docs/planning.md is this
// test's output.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "ddpd/common/memory_estimate.h"
#include "support/process.h"

namespace ddpd::testing {
namespace {

struct PredictionCase {
  int world;
  std::vector<std::string> flags;  // beside the shape
  DdpJobOptions options;           // the same job, for the prediction
  bool shm;
};

// The bench model (d 256, d_ff 1024, 4 layers, 4 heads, vocab 10000) at context 32, batch 12
// (divisible by 1 to 4 ranks).
DdpJobOptions prediction_bench_job() {
  DdpJobOptions o;
  o.d_model = 256;
  o.d_ff = 1024;
  o.num_layers = 4;
  o.num_heads = 4;
  o.vocab_size = 10000;
  o.context_length = 32;
  o.batch_size = 12;
  return o;
}

PredictionCase prediction_case(int world, Strategy strategy, std::vector<std::string> flags = {}) {
  PredictionCase c{world, {"--strategy", enum_name(strategy)}, prediction_bench_job(), world > 1};
  c.options.strategy = strategy;
  for (size_t i = 0; i < flags.size(); ++i) {
    const std::string& flag = flags[i];
    if (flag == "--shard-optimizer") c.options.shard_optimizer = true;
    if (flag == "--shard-replicas") c.options.shard_replicas = std::stoll(flags[i + 1]);
    if (flag == "--activation-checkpointing")
      c.options.activation_checkpointing = parse_enum<ActivationCheckpointing>(flags[i + 1]);
    if (flag == "--transport") c.shm = flags[i + 1] == "shm";
    c.flags.push_back(flag);
  }
  return c;
}

std::vector<PredictionCase> prediction_cases() {
  std::vector<PredictionCase> out{
      prediction_case(1, Strategy::kBucketed)};  // world 1: no synchroniser
  for (int world = 2; world <= 4; ++world) {
    for (Strategy s : {Strategy::kNaive, Strategy::kFlat, Strategy::kOverlap, Strategy::kBucketed,
                       Strategy::kFsdp}) {
      out.push_back(prediction_case(world, s));
    }
  }
  out.push_back(prediction_case(2, Strategy::kBucketed, {"--transport", "gloo"}));
  out.push_back(prediction_case(3, Strategy::kBucketed, {"--shard-optimizer"}));
  out.push_back(
      prediction_case(3, Strategy::kBucketed, {"--shard-optimizer", "--shard-replicas", "1"}));
  out.push_back(prediction_case(3, Strategy::kFsdp, {"--shard-replicas", "1"}));
  out.push_back(prediction_case(2, Strategy::kBucketed, {"--activation-checkpointing", "block"}));
  out.push_back(prediction_case(2, Strategy::kFsdp, {"--activation-checkpointing", "selective"}));
  return out;
}

// Rank 0's measured peak of live tensor bytes in the last step.
int64_t measured_tensor_peak(const PredictionCase& c) {
  std::vector<std::string> argv{binary_dir() + "/ddpd-worker",
                                "run",
                                "ddp",
                                "--d-model",
                                "256",
                                "--d-ff",
                                "1024",
                                "--layers",
                                "4",
                                "--heads",
                                "4",
                                "--vocab",
                                "10000",
                                "--context",
                                "32",
                                "--batch",
                                "12",
                                "--steps",
                                "2",
                                "--threads",
                                "1",
                                "--spread-every",
                                "0",
                                "--json"};
  argv.insert(argv.end(), c.flags.begin(), c.flags.end());
  const auto outcomes =
      c.world == 1 ? std::vector<ProcessOutcome>{run_process(argv, {}, std::chrono::seconds(120))}
                   : run_ranks(argv, c.world, std::chrono::seconds(120));
  for (const auto& o : outcomes) EXPECT_EQ(o.exit_code, 0) << o.err;
  if (outcomes[0].exit_code != 0) return -1;
  return nlohmann::json::parse(outcomes[0].out)
      .at("memory")
      .at("step_peak_tensor_bytes")
      .get<int64_t>();
}

// Within 10 % (issue 62's goal); what the model leaves out are tensors of at most a few hundred
// KB (the token batch, RoPE's tables, the causal mask, scalars), 0.1-0.3 % of these peaks.
TEST(MemoryPrediction, WithinTenPercentOfTheMeasuredPeakAtWorldOneToFour) {
  std::printf("| world | strategy | flags | predicted MiB | measured MiB | error |\n");
  std::printf("| --- | --- | --- | --- | --- | --- |\n");
  for (const PredictionCase& c : prediction_cases()) {
    const int64_t measured = measured_tensor_peak(c);
    ASSERT_GT(measured, 0);
    const int64_t predicted = estimate_rank_memory(c.options, c.world, c.shm).tensor_bytes();
    const double error = static_cast<double>(predicted - measured) / measured;
    std::string flags;
    for (size_t i = 2; i < c.flags.size(); ++i) flags += (i > 2 ? " " : "") + c.flags[i];
    std::printf("| %d | %s | %s | %.2f | %.2f | %+.2f %% |\n", c.world, c.flags[1].c_str(),
                flags.c_str(), predicted / 1048576.0, measured / 1048576.0, 100 * error);
    std::fflush(stdout);
    EXPECT_LE(std::abs(error), 0.10) << "world " << c.world << " " << c.flags[1] << " " << flags;
  }
}

}  // namespace
}  // namespace ddpd::testing
