// FSDP: padding when lengths do not divide by N, and gathered parameters equal the originals.
#include "ddpd/core/grad_sync.h"
#include "multirank/multirank_test_util.h"

namespace ddpd::testing {
namespace {

TEST(FsdpLayout, PadsToAMultipleOfWorldSize) {
  const auto layout = shard_layout(64, 3);  // an RMSNorm gain of the tiny model over 3 ranks
  EXPECT_EQ(layout.numel, 64);
  EXPECT_EQ(layout.shard_numel, 22);
  EXPECT_EQ(layout.padded_numel, 66);
  const auto even = shard_layout(640000, 4);
  EXPECT_EQ(even.shard_numel, 160000);
  EXPECT_EQ(even.padded_numel, 640000);
  const auto tiny = shard_layout(1, 3);
  EXPECT_EQ(tiny.shard_numel, 1);
  EXPECT_EQ(tiny.padded_numel, 3);
}

TEST(FsdpGather, GatheredParametersEqualTheOriginalsOnThreeRanks) {
  // World 3 does not divide the 64-element RMSNorm gains: padding is exercised.
  const std::string prefix =
      run_helper("fsdp-gather", {"--strategy", "fsdp", "--batch", "3", "--steps", "1"}, 3);
  const auto original = load_tensors(rank_file(prefix, 0, "init_local.pt"));
  for (int r = 0; r < 3; ++r) {
    const auto gathered = load_tensors(rank_file(prefix, r, "init_synced.pt"));
    EXPECT_EQ(max_abs_diff(gathered, original), 0) << "rank " << r;
  }
}

// --- units: one per block, gathered on demand --------------------------------------------------

// The tiny preset with 8 blocks and a 512-token vocabulary: blocks dominate the model, as in the
// models FSDP is for. Float64 (kFloat64Flag), so kElement bytes per element.
constexpr int64_t kD = 64, kFf = 256, kVocab = 512, kBlocks = 8;
constexpr int64_t kElement = kFloat64Bytes;
constexpr int64_t kBlockBytes = kElement * (4 * kD * kD + 3 * kD * kFf + 2 * kD);
constexpr int64_t kEmbeddingBytes = kElement * kVocab * kD;
constexpr int64_t kHeadBytes = kElement * (kVocab * kD + kD);  // final norm and LM head

struct UnitCase {
  int world;
  int prefetch;
  bool tied;
};

std::string unit_case_name(const ::testing::TestParamInfo<UnitCase>& info) {
  return "w" + std::to_string(info.param.world) + "_prefetch" +
         std::to_string(info.param.prefetch) + (info.param.tied ? "_tied" : "");
}

std::vector<std::string> eight_blocks(std::vector<std::string> extra) {
  std::vector<std::string> args{kFloat64Flag, "--layers", "8",       "--vocab", "512",
                                "--batch",    "12",       "--steps", "3"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// Rank `rank`'s averaged gradients equal one process's at every step, and so do its parameters
// after the last step, within float64 summation order (the bounds' derivation is at
// kFloat64Flag).
void expect_matches_one_process(const std::string& prefix, const std::string& single, int rank,
                                int world) {
  for (int step = 0; step < 3; ++step) {
    const auto expected =
        load_tensors(rank_file(single, 0, "grads" + std::to_string(step) + ".pt"));
    EXPECT_LT(
        max_relative_diff(testing::full_gradients(prefix, rank, step, "fsdp", world), expected),
        kGradientRelativeBound)
        << "rank " << rank << " step " << step;
  }
  EXPECT_LT(max_abs_diff(load_tensors(rank_file(prefix, rank, "final.pt")),
                         load_tensors(rank_file(single, 0, "final.pt"))),
            kParameterBound)
      << "rank " << rank;
}

class FsdpUnits : public ::testing::TestWithParam<UnitCase> {};

// The peak of full parameters stays at (1 + prefetch) blocks plus the embedding or head unit
// (both, as one unit, when tied); full gradients of at most two units (adjacent in backward) are
// alive at once, besides the tied unit's; and training still matches one process.
TEST_P(FsdpUnits, GatherOnlyTheUnitsAtWorkAndStillMatchOneProcess) {
  const UnitCase c = GetParam();
  std::vector<std::string> flags{"--strategy", "fsdp", "--fsdp-prefetch",
                                 std::to_string(c.prefetch)};
  if (c.tied) flags.push_back("--tie-embeddings");
  const std::string name = "fsdp-units-" + unit_case_name({c, 0});
  const auto prefix = run_helper(name, eight_blocks(flags), c.world);
  std::vector<std::string> single_flags;
  if (c.tied) single_flags.push_back("--tie-embeddings");
  const auto single = run_helper(name + "-single", eight_blocks(single_flags), 1);

  const int64_t padding = kElement * c.world * (kBlocks + 2);  // at most N - 1 elements per unit
  const int64_t edge_unit =
      c.tied ? kEmbeddingBytes + kD * kElement : std::max(kEmbeddingBytes, kHeadBytes);
  const int64_t bound = (1 + c.prefetch) * kBlockBytes + edge_unit + padding;
  const int64_t model_bytes =
      kBlocks * kBlockBytes + kEmbeddingBytes + kHeadBytes - (c.tied ? kVocab * kD * kElement : 0);
  for (int r = 0; r < c.world; ++r) {
    const auto memory = load_json(rank_file(prefix, r, "json"))["result"]["memory"];
    const int64_t params = memory["step_peak_unsharded_parameter_bytes"].get<int64_t>();
    std::printf("[ fsdp ] rank %d: peak full parameters %lld bytes (bound %lld, model %lld)\n", r,
                static_cast<long long>(params), static_cast<long long>(bound),
                static_cast<long long>(model_bytes));
    EXPECT_LE(params, bound) << "rank " << r;
    // It did gather: at least one block and the edge unit were whole at once.
    EXPECT_GE(params, kBlockBytes + std::min(kEmbeddingBytes, kHeadBytes)) << "rank " << r;
    EXPECT_LE(memory["step_peak_full_gradient_units"].get<int64_t>(), c.tied ? 3 : 2)
        << "rank " << r;
    expect_matches_one_process(prefix, single, r, c.world);
  }
}

INSTANTIATE_TEST_SUITE_P(OnEachTransport, FsdpUnits,
                         ::testing::Values(UnitCase{2, 1, false}, UnitCase{4, 1, false},
                                           UnitCase{2, 0, true}, UnitCase{3, 2, false}),
                         unit_case_name);

// --- full gradients: two units, on every transport ---------------------------------------------

// The shape of the goal (issue 62, docs/fsdp.md "Memory accounting"): 8 blocks of d_model 128,
// d_ff 512, vocab 1000, untied; float64 here, so every figure is in kElement-byte elements.
constexpr int64_t kWideD = 128, kWideFf = 512, kWideVocab = 1000;
constexpr int64_t kWideBlockNumel = 4 * kWideD * kWideD + 3 * kWideD * kWideFf + 2 * kWideD;
constexpr int64_t kWideModelNumel =
    kBlocks * kWideBlockNumel + kWideVocab * kWideD + (kWideVocab * kWideD + kWideD);

std::vector<std::string> wide_blocks(std::vector<std::string> extra) {
  std::vector<std::string> args{kFloat64Flag, "--d-model", "128",      "--d-ff",  "512",
                                "--heads",    "4",         "--layers", "8",       "--vocab",
                                "1000",       "--batch",   "12",       "--steps", "3"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

class FsdpGradients : public ::testing::TestWithParam<int> {};

// The bound, from the schedule (docs/fsdp.md "One step"): a unit's full gradient lives from its
// backward until its reduce-scatter ends, and before unit u's backward allocates u's, the unit
// two back in backward order has been waited for and freed. So at most two units' full
// gradients are alive at once: u's, and the one before it, whose reduce-scatter may still run.
// The largest units are blocks (262,400 elements, against the embedding's 128,000 and the head's
// 128,128), so the bound is two blocks, plus what each of the two reduce-scatters in flight
// allocates besides the shard it sums into: nothing over shm (its reduce-scatter reads the
// inputs where they are and writes the shard), nothing over Gloo at world 2 (the peer's copy of
// this rank's chunk is received straight into the shard), one chunk (a block / N) over Gloo
// beyond; and at most N - 1 padding elements per unit. At world 2 that is 2 × 262,400 of
// 2,355,328 elements, 0.223 of the model: the goal, 0.25, holds on both transports (it was 0.446
// while each unit in flight held a receive buffer of its own size). Training still matches one
// process.
TEST_P(FsdpGradients, TwoUnitsOfFullGradientsAtMostAndStillMatchOneProcess) {
  const int world = GetParam();
  const std::string name = "fsdp-gradients-w" + std::to_string(world);
  const auto prefix = run_helper(name, wide_blocks({"--strategy", "fsdp"}), world);
  const auto single = run_helper(name + "-single", wide_blocks({}), 1);
  const bool gloo = test_transport() == "gloo";
  const int64_t buffer_numel = gloo && world > 2 ? kWideBlockNumel / world + 1 : 0;
  const int64_t bound = kElement * 2 * (kWideBlockNumel + world - 1 + buffer_numel);
  const int64_t model_bytes = kElement * kWideModelNumel;
  for (int r = 0; r < world; ++r) {
    const auto memory = load_json(rank_file(prefix, r, "json"))["result"]["memory"];
    const int64_t grads = memory["step_peak_unsharded_gradient_bytes"].get<int64_t>();
    std::printf(
        "[ fsdp ] rank %d: peak full gradients %lld bytes, %.3f of the model (bound %lld)\n", r,
        static_cast<long long>(grads),
        static_cast<double>(grads) / static_cast<double>(model_bytes),
        static_cast<long long>(bound));
    EXPECT_LE(grads, bound) << "rank " << r;
    if (world == 2) EXPECT_LE(grads * 4, model_bytes) << "rank " << r << ": over 0.25 of the model";
    // It did hold a block's full gradient, and the accounting did not lose one.
    EXPECT_GE(grads, kElement * kWideBlockNumel) << "rank " << r;
    EXPECT_LE(memory["step_peak_full_gradient_units"].get<int64_t>(), 2) << "rank " << r;
    expect_matches_one_process(prefix, single, r, world);
  }
}

INSTANTIATE_TEST_SUITE_P(OnEachTransport, FsdpGradients, ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "w" + std::to_string(info.param);
                         });

// --fsdp-units whole gathers the whole model; --reshard-after-forward false keeps every unit
// from its forward to its backward. Both still match one process.
TEST(FsdpUnits, WholeModelAndNoReshardHoldTheWholeModelAtTheirPeak) {
  const auto single = run_helper("fsdp-modes-single", eight_blocks({}), 1);
  const int64_t model_bytes = kBlocks * kBlockBytes + kEmbeddingBytes + kHeadBytes;
  for (const auto& mode : std::vector<std::vector<std::string>>{
           {"--fsdp-units", "whole"}, {"--reshard-after-forward", "false"}}) {
    std::vector<std::string> flags{"--strategy", "fsdp"};
    flags.insert(flags.end(), mode.begin(), mode.end());
    const auto prefix = run_helper("fsdp-mode-" + mode[0].substr(2), eight_blocks(flags), 2);
    const auto memory = load_json(rank_file(prefix, 0, "json"))["result"]["memory"];
    const int64_t params = memory["step_peak_unsharded_parameter_bytes"].get<int64_t>();
    EXPECT_GE(params, model_bytes) << mode[0];
    EXPECT_LE(params, model_bytes + kElement * 2 * (kBlocks + 2)) << mode[0];
    expect_matches_one_process(prefix, single, 0, 2);
  }
}

}  // namespace
}  // namespace ddpd::testing
