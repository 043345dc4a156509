// --activation-checkpointing block and selective under every strategy at world 2 and 3, with
// gradient accumulation, with gradient compression, and from Hugging Face models (--init-from:
// GQA with tied embeddings, Qwen2's q/k/v biases): real ranks, run by the product's Trainer, give
// bitwise the loss of every step, the averaged gradients of every step and the final parameters
// of the same run without checkpointing (core/src/train/activation_checkpoint.h says why they
// can: the recompute runs the same kernels on the same values in the same order). float32, not
// the float64 of the equivalence suites: the comparison is with the same world size and the same
// summation order, so there is no rounding to bound.
#include <filesystem>
#include <sstream>

#include "multirank/multirank_test_util.h"

namespace ddpd::testing {
namespace {

namespace fs = std::filesystem;
constexpr int kSteps = 3;

struct Case {
  std::string strategy;
  int world;
  std::string mode;                // block | selective
  std::vector<std::string> extra;  // more flags, both runs
  std::string label;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.strategy << " on " << c.world << " ranks, " << c.mode << " " << c.label;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return c.strategy + "_w" + std::to_string(c.world) + "_" + c.mode +
         (c.label.empty() ? "" : "_" + c.label);
}

// Batch 12: at world 2 and 3 each rank's rows split into the two accumulated micro-batches.
std::vector<std::string> flags(const Case& c) {
  return with({"--strategy", c.strategy, "--bucket-mb", "0.05", "--batch", "12", "--grad-accum",
               "2", "--steps", std::to_string(kSteps), "--seed", "5"},
              c.extra);
}

// A tiny Hugging Face model of `kind` made by tests/hf/hf_reference.py (as hf_model_test.cpp's
// fixtures, in the same build folder: one made there already is reused).
std::string hf_fixture(const std::string& kind) {
  std::ifstream script(std::string(DDPD_SOURCE_DIR) + "/tests/hf/hf_reference.py");
  std::stringstream text;
  text << script.rdbuf();
  const std::string root =
      std::string(DDPD_HF_FIXTURE_DIR) + "/" + std::to_string(std::hash<std::string>{}(text.str()));
  const std::string dir = root + "/" + kind;
  if (!fs::exists(dir + "/config.json")) {
    const std::string mine = dir + ".making-" + std::to_string(::getpid());
    fs::create_directories(root);
    fs::remove_all(mine);
    const auto made =
        run_process({DDPD_PEER_PYTHON, std::string(DDPD_SOURCE_DIR) + "/tests/hf/hf_reference.py",
                     "make", kind, mine},
                    {}, std::chrono::seconds(300));
    EXPECT_EQ(made.exit_code, 0) << made.err;
    std::error_code taken;
    fs::rename(mine, dir, taken);
    if (taken) fs::remove_all(mine);
  }
  return dir;
}

// The index of the first tensor that differs in a bit (or in shape), -1 when none does. fsdp's
// shards may be empty, so no reduction.
int first_difference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].sizes() != b[i].sizes() || !torch::equal(a[i], b[i])) return static_cast<int>(i);
  }
  return -1;
}

class ActivationCheckpointEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(ActivationCheckpointEquivalence, LossGradientsAndParametersAreBitwiseThoseWithout) {
  Case c = GetParam();
  if (c.label == "qwen2" || c.label == "llama") {
    c.extra = with(
        {"--init-from", hf_fixture(c.label == "qwen2" ? "qwen2_bias" : "llama_gqa_tied")}, c.extra);
  }
  const std::string name = case_name({c, 0});
  const std::string plain = run_helper("ac-none-" + name, flags(c), c.world);
  const std::string checkpointed =
      run_helper("ac-" + name, with(flags(c), {"--activation-checkpointing", c.mode}), c.world);
  const auto losses = rank0_losses(plain);
  ASSERT_EQ(losses.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(rank0_losses(checkpointed), losses);
  for (int r = 0; r < c.world; ++r) {
    for (int step = 0; step < kSteps; ++step) {
      const std::string file = "grads" + std::to_string(step) + ".pt";
      EXPECT_EQ(first_difference(load_tensors(rank_file(checkpointed, r, file)),
                                 load_tensors(rank_file(plain, r, file))),
                -1)
          << "rank " << r << " step " << step << ": this gradient differs";
    }
    EXPECT_EQ(first_difference(load_tensors(rank_file(checkpointed, r, "final.pt")),
                               load_tensors(rank_file(plain, r, "final.pt"))),
              -1)
        << "rank " << r << ": this parameter differs";
  }
  // Training moved the parameters (the loss changed), so equality is not two untouched models'.
  EXPECT_NE(losses.front(), losses.back());
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (const std::string s : {"naive", "flat", "overlap", "bucketed", "fsdp"}) {
    for (int world : {2, 3}) cases.push_back({s, world, "block", {}, ""});
    cases.push_back({s, 2, "selective", {}, ""});
  }
  cases.push_back({"bucketed", 2, "block", {"--grad-compression", "bf16"}, "bf16wire"});
  cases.push_back({"overlap", 3, "block", {"--grad-compression", "fp16"}, "fp16wire"});
  cases.push_back({"fsdp", 2, "block", {"--fsdp-prefetch", "2"}, "prefetch2"});
  cases.push_back({"fsdp", 3, "block", {"--reshard-after-forward", "false"}, "keep"});
  cases.push_back({"fsdp", 2, "block", {"--tie-embeddings"}, "tied"});
  cases.push_back({"bucketed", 2, "block", {"--freeze-embedding"}, "frozen"});
  cases.push_back({"fsdp", 2, "block", {}, "qwen2"});
  cases.push_back({"bucketed", 3, "block", {}, "llama"});
  cases.push_back({"fsdp", 2, "selective", {}, "llama"});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(OnEachTransport, ActivationCheckpointEquivalence,
                         ::testing::ValuesIn(all_cases()), case_name);

}  // namespace
}  // namespace ddpd::testing
