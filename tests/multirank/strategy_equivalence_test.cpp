// Every strategy, with and without the sharded optimizer, at world sizes 2 and 3, run by the
// product's Trainer: all ranks agree, and match single-process training on the same global
// batch — the averaged gradients at every step, and the parameters after several AdamW steps.
#include "ddpd/common/job_options.h"
#include "multirank/multirank_test_util.h"

namespace ddpd::testing {
namespace {

constexpr int kSteps = 4;

struct Case {
  std::string strategy;
  bool shard_optimizer;
  int world;
};

// Test names and GoogleTest's parameter lines show the case, not its bytes.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.strategy << (c.shard_optimizer ? " + ZeRO-1" : "") << " on " << c.world << " ranks";
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.strategy + (info.param.shard_optimizer ? "_zero1" : "") + "_w" +
         std::to_string(info.param.world);
}

// Common training flags: float64 (see kFloat64Flag); global batch 6 divides by 1, 2 and 3;
// 0.05 MiB buckets are smaller than the 5 MiB (float64) embedding and give many buckets. The
// AdamW options are not the defaults, so a trainer that ignored them would not match the
// reference, which the test below checks honours them.
std::vector<std::string> training_flags(const std::string& strategy) {
  return {kFloat64Flag,
          "--strategy",
          strategy,
          "--bucket-mb",
          "0.05",
          "--batch",
          "6",
          "--steps",
          std::to_string(kSteps),
          "--seed",
          "7",
          "--lr",
          "0.01",
          "--beta1",
          "0.8",
          "--beta2",
          "0.95",
          "--eps",
          "1e-6",
          "--weight-decay",
          "0.05"};
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

// Step `step`'s averaged gradients as full tensors (fsdp shards concatenated over ranks).
std::vector<torch::Tensor> case_gradients(const std::string& prefix, int rank, int step,
                                          const Case& c) {
  return testing::full_gradients(prefix, rank, step, c.strategy, c.world);
}

class StrategyEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(StrategyEquivalence, RanksAgreeAndMatchSingleProcessAtEveryStep) {
  const Case c = GetParam();
  auto args = training_flags(c.strategy);
  if (c.shard_optimizer) args.push_back("--shard-optimizer");
  const std::string prefix = run_helper(case_name({c, 0}), args, c.world);
  const std::string& ref = reference({});
  const auto expected = load_tensors(rank_file(ref, 0, "final.pt"));
  const auto expected_init = load_tensors(rank_file(ref, 0, "init_synced.pt"));

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
    // The averaged gradients equal the single-process gradients of the whole batch at every
    // step. AdamW is scale-invariant, so parameters alone would not catch a sum that was never
    // divided by N; the bound is float64 summation order, far below a factor of N.
    for (int step = 0; step < kSteps; ++step) {
      const auto expected_grads =
          load_tensors(rank_file(ref, 0, "grads" + std::to_string(step) + ".pt"));
      EXPECT_LT(max_relative_diff(case_gradients(prefix, r, step, c), expected_grads),
                kGradientRelativeBound)
          << "rank " << r << " step " << step;
    }
    const auto final_params = load_tensors(rank_file(prefix, r, "final.pt"));
    // Every rank applies the same reduced gradients (or receives its owner's shard): equal.
    EXPECT_EQ(max_abs_diff(final_params, load_tensors(rank_file(prefix, 0, "final.pt"))), 0)
        << "rank " << r << " disagrees with rank 0";
    EXPECT_LT(max_abs_diff(final_params, expected), kParameterBound)
        << "rank " << r << " differs from single-process training";
    // The result says which synchronisation ran.
    const auto result = load_json(rank_file(prefix, r, "json"))["result"];
    EXPECT_EQ(result["synchronization"], c.strategy);
    EXPECT_EQ(result["optimizer_sharding"], c.shard_optimizer);
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

INSTANTIATE_TEST_SUITE_P(OnEachTransport, StrategyEquivalence, ::testing::ValuesIn(all_cases()),
                         case_name);

// --check-collectives wraps the group (core/src/comm/collective_check.h): before every collective
// the ranks compare fingerprints, over the backend inside the wrapper. On a healthy run it
// changes nothing: the same parameters bit for bit, and the same journal, through each kind of
// collective the strategies launch (fsdp: all-gathers and reduce-scatters, over Gloo its list
// all-gather and all-to-all; ZeRO-1: broadcasts, all-reduces and all-gathers).
class CheckedCollectives : public ::testing::TestWithParam<Case> {};

TEST_P(CheckedCollectives, AHealthyRunIsUnchangedBitForBit) {
  const Case c = GetParam();
  auto args = training_flags(c.strategy);
  if (c.shard_optimizer) args.push_back("--shard-optimizer");
  const std::string plain = run_helper(case_name({c, 0}) + "_plain", args, c.world);
  args.push_back("--check-collectives");
  const std::string checked = run_helper(case_name({c, 0}) + "_checked", args, c.world);
  for (int r = 0; r < c.world; ++r) {
    EXPECT_EQ(max_abs_diff(load_tensors(rank_file(checked, r, "final.pt")),
                           load_tensors(rank_file(plain, r, "final.pt"))),
              0)
        << "rank " << r;
    const auto journal = [&](const std::string& prefix) {
      nlohmann::json ops = nlohmann::json::array();
      const nlohmann::json report = load_json(rank_file(prefix, r, "json"));
      for (const auto& e : report["journal"]["entries"]) {
        ops.push_back({e["op"], e["numel"], e["state"]});
      }
      return ops;
    };
    EXPECT_EQ(journal(checked), journal(plain)) << "rank " << r;
    EXPECT_GT(journal(plain).size(), 10u) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(OnEachTransport, CheckedCollectives,
                         ::testing::Values(Case{"fsdp", false, 3}, Case{"bucketed", true, 2}),
                         case_name);

// --clip-grad-norm and a warmed-up cosine schedule: every strategy's global pre-clip norm equals
// single-process training's at every step (fsdp sums its shards' squares across ranks, each
// parameter once), the learning rates are the schedule's, and the clipped run ends where the
// single-process clipped run does.
class ClippingAndSchedule : public ::testing::TestWithParam<Case> {};

std::vector<double> step_values(const std::string& prefix, const char* key) {
  std::vector<double> out;
  const nlohmann::json report = load_json(rank_file(prefix, 0, "json"));
  for (const auto& s : report["result"]["steps"]) out.push_back(s[key].get<double>());
  return out;
}

TEST_P(ClippingAndSchedule, NormsLearningRatesAndParametersMatchSingleProcess) {
  const Case c = GetParam();
  const std::vector<std::string> extra{"--clip-grad-norm",  "0.5", "--lr-schedule", "cosine",
                                       "--lr-warmup-steps", "1",   "--min-lr",      "0.001"};
  std::vector<std::string> args = training_flags(c.strategy);
  args.insert(args.end(), extra.begin(), extra.end());
  if (c.shard_optimizer) args.push_back("--shard-optimizer");
  const std::string prefix = run_helper("clip-" + case_name({c, 0}), args, c.world);
  const std::string& single = reference(extra);
  const auto norms = step_values(prefix, "grad_norm"), expected = step_values(single, "grad_norm");
  ASSERT_EQ(norms.size(), expected.size());
  bool clipped = false;
  for (size_t i = 0; i < norms.size(); ++i) {
    EXPECT_NEAR(norms[i] / expected[i], 1.0, kGradientRelativeBound)
        << "step " << i << ": " << norms[i] << " vs " << expected[i];
    clipped |= expected[i] > 0.5;
  }
  EXPECT_TRUE(clipped) << "max norm 0.5 never bit: the test would not see clipping";
  const auto lrs = step_values(prefix, "lr");
  EXPECT_DOUBLE_EQ(lrs.front(), 0.01);  // one warm-up step: lr * 1 / 1
  EXPECT_DOUBLE_EQ(lrs.back(), 0.001);  // the cosine ends at --min-lr
  EXPECT_EQ(lrs, step_values(single, "lr"));
  EXPECT_LT(max_abs_diff(load_tensors(rank_file(single, 0, "final.pt")),
                         load_tensors(rank_file(prefix, 0, "final.pt"))),
            kParameterBound);
}

std::vector<Case> clipping_cases() {
  std::vector<Case> cases;
  for (const std::string s : {"naive", "flat", "overlap", "bucketed", "fsdp"}) {
    cases.push_back({s, false, 2});
  }
  cases.push_back({"flat", true, 3});
  cases.push_back({"fsdp", false, 3});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Strategies, ClippingAndSchedule, ::testing::ValuesIn(clipping_cases()),
                         case_name);

// Every rank journals the same collectives under the same sequence numbers (what matching
// journals across ranks relies on), all completed; the ring keeps the last --journal-size.
class CollectiveJournalAcrossRanks : public ::testing::TestWithParam<std::string> {};

TEST_P(CollectiveJournalAcrossRanks, RanksRecordTheSameSequenceAndTheRingKeepsTheLast) {
  auto args = training_flags(GetParam());
  args.insert(args.end(), {"--journal-size", "24"});
  if (GetParam() != "fsdp") args.push_back("--shard-optimizer");  // ZeRO-1's broadcasts too
  const std::string prefix = run_helper("journal-" + GetParam(), args, 3);
  const auto rank0 = load_json(rank_file(prefix, 0, "json"))["journal"];
  EXPECT_EQ(rank0["capacity"], 24);
  ASSERT_EQ(rank0["entries"].size(), 24u);
  EXPECT_GT(rank0["last_enqueued"].get<int64_t>(), 24) << "the ring never wrapped";
  EXPECT_EQ(rank0["last_completed"], rank0["last_enqueued"]);
  EXPECT_EQ(rank0["entries"].back()["seq"], rank0["last_enqueued"]);
  for (int r = 1; r < 3; ++r) {
    const auto journal = load_json(rank_file(prefix, r, "json"))["journal"];
    ASSERT_EQ(journal["entries"].size(), rank0["entries"].size()) << "rank " << r;
    for (size_t i = 0; i < journal["entries"].size(); ++i) {
      const auto& mine = journal["entries"][i];
      const auto& theirs = rank0["entries"][i];
      for (const char* field : {"seq", "op", "tag", "numel", "dtype"}) {
        EXPECT_EQ(mine[field], theirs[field]) << "rank " << r << " entry " << i << " " << field;
      }
      EXPECT_EQ(mine["state"], "completed") << "rank " << r << " #" << mine["seq"];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Strategies, CollectiveJournalAcrossRanks,
                         ::testing::Values("overlap", "bucketed", "fsdp"));

// The reference itself: a single process runs no synchronisation and says so, and the AdamW
// options it is given change the result (they are not ignored).
TEST(SingleProcess, ReportsNoSynchronisationAndHonoursAdamWOptions) {
  const auto result = load_json(rank_file(reference({}), 0, "json"))["result"];
  EXPECT_EQ(result["synchronization"], "none") << "world size 1 ran no strategy";
  EXPECT_EQ(result["optimizer_sharding"], false);
  auto shard_args = training_flags("bucketed");
  shard_args.push_back("--shard-optimizer");
  const auto sharded = run_helper("single-zero1", shard_args, 1);
  EXPECT_EQ(load_json(rank_file(sharded, 0, "json"))["result"]["optimizer_sharding"], false)
      << "ZeRO-1 on one rank shards nothing";

  auto default_adamw = training_flags("naive");
  default_adamw.resize(default_adamw.size() - 8);  // drop --beta1 … --weight-decay
  const auto defaults = run_helper("reference-default-adamw", default_adamw, 1);
  EXPECT_GT(max_abs_diff(load_tensors(rank_file(defaults, 0, "final.pt")),
                         load_tensors(rank_file(reference({}), 0, "final.pt"))),
            1e-4)
      << "--beta1/--beta2/--eps/--weight-decay made no difference";
}

// Frozen parameters stay out of synchronisation and unchanged; a tied weight is synchronised
// once and stays tied. FSDP too: it shards only what trains, and the tied weight once.
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
    EXPECT_LT(max_abs_diff(final_params, expected), kParameterBound);
    const auto report = load_json(rank_file(prefix, r, "json"));
    const auto last_step = report["result"]["steps"].back();
    // Replicated strategies all-reduce exactly the trainable bytes; fsdp reduce-scatters them
    // padded to a multiple of N (a few elements at most).
    const int64_t synced = last_step["gradient_sync_bytes"].get<int64_t>();
    const int64_t trainable = report["trainable_bytes"].get<int64_t>();
    if (GetParam() == "fsdp") {
      EXPECT_GE(synced, trainable);
      EXPECT_LT(synced, trainable + kFloat64Bytes * 2 * 64)
          << "fsdp synchronised frozen parameters";
    } else {
      EXPECT_EQ(synced, trainable)
          << "gradient bytes all-reduced per step should be exactly the trainable parameters'";
    }
  }
}

TEST_P(SpecialParameters, TiedWeightIsSynchronisedOnceAndStaysTied) {
  auto args = training_flags(GetParam());
  args.push_back("--tie-embeddings");
  const std::string prefix = run_helper("tied-" + GetParam(), args, 2);
  const auto expected = load_tensors(rank_file(reference({"--tie-embeddings"}), 0, "final.pt"));
  for (int r = 0; r < 2; ++r) {
    const auto final_params = load_tensors(rank_file(prefix, r, "final.pt"));
    EXPECT_LT(max_abs_diff(final_params, expected), kParameterBound);
    const auto report = load_json(rank_file(prefix, r, "json"));
    const int64_t synced = report["result"]["steps"].back()["gradient_sync_bytes"].get<int64_t>();
    const int64_t trainable = report["trainable_bytes"].get<int64_t>();
    if (GetParam() == "fsdp") {
      EXPECT_GE(synced, trainable);
      EXPECT_LT(synced, trainable + kFloat64Bytes * 2 * 64)
          << "the tied weight must be reduced once";
    } else {
      EXPECT_EQ(synced, trainable) << "the tied weight must be all-reduced once";
    }
    EXPECT_TRUE(report["head_shares_embedding"].get<bool>()) << "rank " << r;
    // The 10000 x 64 embedding counts once among the trainable bytes.
    ModelConfig tied = model_preset("tiny");
    tied.tie_embeddings = true;
    EXPECT_EQ(trainable, kFloat64Bytes * count_parameters(tied));
  }
}

INSTANTIATE_TEST_SUITE_P(AllStrategies, SpecialParameters,
                         ::testing::Values("naive", "flat", "overlap", "bucketed", "fsdp"));

}  // namespace
}  // namespace ddpd::testing
