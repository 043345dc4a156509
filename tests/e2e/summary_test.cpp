// Summaries that tell the truth (issue 61, item 5), through real daemons and ddpctl: an imported
// model is shown by its name and shape, --model beside --init-from is refused naming both, and a
// job that trained no step shows no final loss.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "e2e/cluster.h"
#include "support/http.h"

namespace ddpd::testing {
namespace {

// A Hugging Face Llama directory with only its config.json: enough for submit and show.
std::string summary_hf_dir(const std::string& name) {
  const std::string dir = temp_dir() + "/" + name;
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json")
      << nlohmann::json{{"model_type", "llama"},  {"vocab_size", 300},
                        {"hidden_size", 64},      {"intermediate_size", 96},
                        {"num_hidden_layers", 2}, {"num_attention_heads", 4},
                        {"rms_norm_eps", 1e-6},   {"hidden_act", "silu"}}
             .dump();
  return dir;
}

TEST(Summary, AnImportedModelIsShownByItsNameAndShapeAndModelBesideItIsRefused) {
  const std::string dir = summary_hf_dir("tiny-llama");
  Cluster cluster(0, "imported-summary");  // no worker: the job stays PENDING, its spec shown
  const auto submitted =
      cluster.ctl({"submit", "ddp", "--init-from", dir, "--steps", "2", "--batch", "2"});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  const auto shown = cluster.ctl({"show", job_id_of(submitted.out)});
  EXPECT_NE(shown.out.find("  model tiny-llama (llama, d_model 64, 2 layers, 4 heads, vocab 300; "
                           "--init-from " +
                           dir + ")  strategy "),
            std::string::npos)
      << shown.out;
  EXPECT_EQ(shown.out.find("model tiny "), std::string::npos) << shown.out;

  const auto both =
      cluster.ctl({"submit", "ddp", "--model", "small", "--init-from", dir, "--steps", "2"});
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("--model: 'small' and --init-from " + dir +
                          " both name the model: the imported config.json decides it, so leave "
                          "out --model"),
            std::string::npos)
      << both.err;
}

TEST(Summary, AJobThatTrainedNoStepShowsNoFinalLoss) {
  const int metrics_port = unused_port();
  Cluster cluster(1, "no-step-summary", {}, [&](int) {
    return std::vector<std::string>{"--metrics-port", std::to_string(metrics_port)};
  });
  const auto submitted =
      cluster.ctl({"submit", "ddp", "--steps", "0", "--batch", "2", "--context", "16"});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  const std::string job = job_id_of(submitted.out);
  const auto ended = cluster.wait_for_end(job);
  ASSERT_EQ(ended["state"], "SUCCEEDED") << ended.dump();
  const auto shown = cluster.ctl({"show", job});
  EXPECT_NE(shown.out.find("no step trained: no loss and no step times"), std::string::npos)
      << shown.out;
  EXPECT_EQ(shown.out.find("final loss"), std::string::npos) << shown.out;
  const std::string text = ended.dump();
  EXPECT_EQ(text.find("final_loss"), std::string::npos) << text;           // absent, not 0
  EXPECT_NE(text.find("median_step_seconds"), std::string::npos) << text;  // the summary is there
  // The worker's /metrics keeps the job's series until its next job: no ddpd_loss among them.
  const auto metrics = http_get(metrics_port, "/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("ddpd_steps_total{job_id=\"" + job + "\""), std::string::npos)
      << metrics.body;
  EXPECT_EQ(metrics.body.find("ddpd_loss{"), std::string::npos) << metrics.body;
}

}  // namespace
}  // namespace ddpd::testing
