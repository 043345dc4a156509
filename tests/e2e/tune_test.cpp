// `ddpctl tune` against a real coordinator and workers: every trial is a job the coordinator ran,
// the winner is written as a job file that `submit -f` takes unchanged, and Ctrl-C cancels the
// running trial. Which configuration wins is the host's business, not this test's.
#include <algorithm>
#include <csignal>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "e2e/cluster.h"

namespace ddpd::testing {
namespace {

const std::vector<std::string> kModel = {
    "--model", "tiny", "--batch",   "4",   "--context", "16", "--threads",      "1",
    "--vocab", "2048", "--d-model", "128", "--steps",   "5",  "--spread-every", "0"};

std::vector<std::string> tune_args(const std::string& output, const std::string& budget) {
  std::vector<std::string> args{"tune", "--world-size", "2",    "--trial-steps",
                                "3",    "--budget",     budget, "--single-transport",
                                "-o",   output};
  args.insert(args.end(), kModel.begin(), kModel.end());
  return args;
}

TEST(Tune, EveryTrialIsACoordinatorJobAndTheWinnerResubmitsUnchanged) {
  Cluster cluster(2, "tune");
  const std::string best = temp_dir() + "/tune-best.yaml";
  auto args = tune_args(best, "90s");
  args.push_back("--json");
  const auto tuned = cluster.ctl(args);
  ASSERT_EQ(tuned.exit_code, 0) << tuned.err;
  const auto out = nlohmann::json::parse(tuned.out);
  ASSERT_TRUE(out.contains("winner")) << tuned.out;
  int trials = 0, skipped = 0;
  for (const auto& c : out["candidates"]) {
    for (const auto& t : c.value("trials", nlohmann::json::array())) {
      ++trials;
      const auto job = cluster.show(t["job_id"]);
      EXPECT_EQ(job["state"], "SUCCEEDED") << t["job_id"];
      EXPECT_EQ(job["world_size"], 2);
      EXPECT_EQ(job["steps"].size(), t["steps"].get<size_t>());
    }
    if (!c["skipped"].get<std::string>().empty()) {
      ++skipped;  // a skipped candidate never ran, and says why
      EXPECT_FALSE(c.contains("trials")) << c.dump();
    }
  }
  EXPECT_GE(trials, 2) << tuned.out;
  // The winner's trial is the first candidate's; the file resubmits as the user's job (its
  // --steps, not the trial's) with the winner's strategy.
  const auto& winner = out["candidates"][0];
  std::ifstream file(best);
  ASSERT_TRUE(file.good()) << best;
  const auto submitted = cluster.ctl({"submit", "ddp", "-f", best});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  const std::string job = submitted.out.substr(0, submitted.out.find('\n'));
  const auto ran = cluster.wait_for_end(job);
  EXPECT_EQ(ran["state"], "SUCCEEDED") << ran.dump();
  EXPECT_EQ(ran["steps"].size(), 5u);
  EXPECT_EQ(ran["spec"]["ddp"]["strategy"], winner["strategy"]);
  EXPECT_EQ(ran["spec"]["ddp"]["shard_optimizer"].get<bool>(),
            winner["shard_optimizer"].get<bool>());
}

TEST(Tune, CtrlCCancelsTheRunningTrialAndStops) {
  Cluster cluster(2, "tune-cancel");
  const std::string best = temp_dir() + "/tune-cancelled.yaml";
  std::vector<std::string> argv{bin("ddpctl"), "--coordinator", cluster.address()};
  for (auto& a : tune_args(best, "10m")) argv.push_back(a);
  auto steps = std::find(argv.begin(), argv.end(), "--trial-steps");
  *(steps + 1) = "5000";  // a probe that runs until it is cancelled
  BackgroundProcess tune(argv, {{"DDPD_TOKEN", kToken}}, "tune-cancel-ctl");
  std::string running;
  ASSERT_TRUE(cluster.wait_until(
      [&] {
        std::istringstream lines(cluster.ctl({"list"}).out);
        for (std::string line; std::getline(lines, line);) {
          if (line.find(" RUNNING ") != std::string::npos) running = line.substr(0, line.find(' '));
        }
        return !running.empty();
      },
      std::chrono::seconds(60)));
  tune.signal(SIGINT);
  EXPECT_EQ(tune.wait(std::chrono::seconds(60)), 1) << tune.log();
  EXPECT_NE(tune.log().find("cancelled"), std::string::npos) << tune.log();
  EXPECT_EQ(cluster.wait_for_end(running)["state"], "CANCELLED");
  EXPECT_FALSE(std::ifstream(best).good()) << "a cancelled search writes no winner";
}

// `ddpctl local tune`: the same search on a coordinator and workers it starts and stops itself.
TEST(Tune, LocalTuneStartsItsOwnClusterAndWritesTheWinner) {
  const std::string best = temp_dir() + "/tune-local.yaml";
  std::vector<std::string> argv{bin("ddpctl"), "local"};
  for (auto& a : tune_args(best, "40s")) argv.push_back(a);
  argv.push_back("--json");
  const auto tuned = run_process(argv, {}, std::chrono::seconds(180));
  ASSERT_EQ(tuned.exit_code, 0) << tuned.err;
  const auto out = nlohmann::json::parse(tuned.out);
  ASSERT_TRUE(out.contains("winner")) << tuned.out;
  EXPECT_FALSE(out["candidates"][0]["trials"].empty());
  std::ifstream file(best);
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("world-size: 2"), std::string::npos) << text;
  EXPECT_NE(text.find("steps: 5"), std::string::npos) << text;
}

}  // namespace
}  // namespace ddpd::testing
