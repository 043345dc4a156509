// Every strategy, with and without the sharded optimizer, at world sizes 2 and 3: after several
// AdamW steps all ranks agree and match single-process training on the concatenated batch.
#include "ddpd/job_options.h"
#include "multirank/multirank_test_util.h"

namespace ddpd::testing {
namespace {

struct Case {
  std::string strategy;
  bool shard_optimizer;
  int world;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.strategy + (info.param.shard_optimizer ? "_sharded" : "") + "_w" +
         std::to_string(info.param.world);
}

// Common training flags: global batch 6 divides by 1, 2 and 3; 0.05 MiB buckets are smaller
// than the 2.5 MiB embedding and give many buckets.
std::vector<std::string> training_flags(const std::string& strategy) {
  return {"--strategy", strategy, "--bucket-mb", "0.05", "--batch", "6",
          "--steps",    "4",      "--seed",      "7",    "--lr",    "0.01"};
}

// The single-process reference, computed once per flag set.
const std::string& reference(const std::vector<std::string>& extra) {
  static std::map<std::vector<std::string>, std::string> cache;
  auto it = cache.find(extra);
  if (it != cache.end()) return it->second;
  std::vector<std::string> args = training_flags("naive");
  args.insert(args.end(), extra.begin(), extra.end());
  std::string name = "reference";
  for (const auto& e : extra) name += e;
  return cache[extra] = run_helper(name, args, 1);
}

// The first step's averaged gradients as full tensors; fsdp ranks hold shards, so theirs are
// concatenated over ranks and the padding dropped.
std::vector<torch::Tensor> full_gradients(const std::string& prefix, int rank, const Case& c) {
  auto grads = load_tensors(rank_file(prefix, rank, "grads0.pt"));
  if (c.strategy != "fsdp") return grads;
  std::vector<std::vector<torch::Tensor>> shards;
  for (int r = 0; r < c.world; ++r)
    shards.push_back(load_tensors(rank_file(prefix, r, "grads0.pt")));
  const auto shapes = load_tensors(rank_file(prefix, rank, "init_synced.pt"));
  std::vector<torch::Tensor> full;
  for (size_t i = 0; i < grads.size(); ++i) {
    std::vector<torch::Tensor> pieces;
    for (auto& s : shards) pieces.push_back(s[i]);
    full.push_back(torch::cat(pieces).narrow(0, 0, shapes[i].numel()).view(shapes[i].sizes()));
  }
  return full;
}

class StrategyEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(StrategyEquivalence, RanksAgreeAndMatchSingleProcess) {
  const Case c = GetParam();
  auto args = training_flags(c.strategy);
  if (c.shard_optimizer) args.push_back("--shard-optimizer");
  const std::string prefix = run_helper(case_name({c, 0}), args, c.world);
  const auto expected = load_tensors(rank_file(reference({}), 0, "final.pt"));
  const auto expected_init = load_tensors(rank_file(reference({}), 0, "init_synced.pt"));
  const auto expected_grads = load_tensors(rank_file(reference({}), 0, "grads0.pt"));

  const auto rank0_local = load_tensors(rank_file(prefix, 0, "init_local.pt"));
  for (int r = 0; r < c.world; ++r) {
    // Ranks start from their own initialisation (seed + rank) ...
    if (r > 0) {
      EXPECT_GT(max_abs_diff(load_tensors(rank_file(prefix, r, "init_local.pt")), rank0_local),
                1e-3)
          << "rank " << r << " started identical to rank 0: the broadcast is not tested";
    }
    // ... construction broadcasts rank 0's, which is what single-process training starts from.
    EXPECT_EQ(max_abs_diff(load_tensors(rank_file(prefix, r, "init_synced.pt")), expected_init), 0)
        << "rank " << r;
    const auto final_params = load_tensors(rank_file(prefix, r, "final.pt"));
    EXPECT_LT(max_abs_diff(final_params, load_tensors(rank_file(prefix, 0, "final.pt"))), 1e-6)
        << "rank " << r << " disagrees with rank 0";
    // AdamW's normalised updates amplify float-order noise; 1e-4 is 1% of one lr-sized step.
    EXPECT_LT(max_abs_diff(final_params, expected), 1e-4)
        << "rank " << r << " differs from single-process training";
    // Gradients are checked tightly too: AdamW is scale-invariant, so parameters alone would
    // not catch a sum that was never divided by N.
    EXPECT_LT(max_abs_diff(full_gradients(prefix, r, c), expected_grads), 1e-6) << "rank " << r;
  }
  // Training moved the parameters (a no-op optimizer would also "agree").
  EXPECT_GT(max_abs_diff(expected, expected_init), 1e-3);
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (const std::string s : {"naive", "flat", "overlap", "bucketed", "fsdp"}) {
    for (bool shard : {false, true}) {
      if (shard && s == "fsdp") continue;  // fsdp shards optimizer state itself
      for (int world : {2, 3}) cases.push_back({s, shard, world});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllStrategies, StrategyEquivalence, ::testing::ValuesIn(all_cases()),
                         case_name);

// Frozen parameters stay out of synchronisation and unchanged; a tied weight is synchronised
// once and stays tied.
class SpecialParameters : public ::testing::TestWithParam<std::string> {};

TEST_P(SpecialParameters, FrozenEmbeddingIsNotSynchronisedAndStaysUnchanged) {
  auto args = training_flags(GetParam());
  args.push_back("--freeze-embedding");
  const std::string prefix = run_helper("frozen-" + GetParam(), args, 2);
  const auto init = load_tensors(rank_file(prefix, 0, "init_synced.pt"));
  const auto expected = load_tensors(rank_file(reference({"--freeze-embedding"}), 0, "final.pt"));
  for (int r = 0; r < 2; ++r) {
    const auto final_params = load_tensors(rank_file(prefix, r, "final.pt"));
    EXPECT_EQ((final_params[0] - init[0]).abs().max().item<double>(), 0) << "embedding moved";
    EXPECT_LT(max_abs_diff(final_params, expected), 1e-4);
    const auto report = load_json(rank_file(prefix, r, "json"));
    EXPECT_EQ(report["all_reduced_bytes_last_step"], report["trainable_bytes"])
        << "gradient bytes all-reduced per step should be exactly the trainable parameters'";
  }
}

TEST_P(SpecialParameters, TiedWeightIsSynchronisedOnceAndStaysTied) {
  auto args = training_flags(GetParam());
  args.push_back("--tie-embeddings");
  const std::string prefix = run_helper("tied-" + GetParam(), args, 2);
  const auto expected = load_tensors(rank_file(reference({"--tie-embeddings"}), 0, "final.pt"));
  for (int r = 0; r < 2; ++r) {
    const auto final_params = load_tensors(rank_file(prefix, r, "final.pt"));
    EXPECT_LT(max_abs_diff(final_params, expected), 1e-4);
    const auto report = load_json(rank_file(prefix, r, "json"));
    EXPECT_EQ(report["all_reduced_bytes_last_step"], report["trainable_bytes"])
        << "the tied weight must be all-reduced once";
    EXPECT_TRUE(report["head_shares_embedding"].get<bool>()) << "rank " << r;
    // The 10000 x 64 embedding counts once among the trainable bytes.
    ModelConfig tied = model_preset("tiny");
    tied.tie_embeddings = true;
    EXPECT_EQ(report["trainable_bytes"].get<int64_t>(), 4 * count_parameters(tied));
  }
}

INSTANTIATE_TEST_SUITE_P(ReplicatedStrategies, SpecialParameters,
                         ::testing::Values("naive", "flat", "overlap", "bucketed"));

}  // namespace
}  // namespace ddpd::testing
