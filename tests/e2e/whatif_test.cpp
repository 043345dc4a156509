// `ddpctl whatif` against a real coordinator and workers, and on a `ddpctl local` run's JSON: the
// machinery (the measured figures are the job's, the replay's compute is the profile's, one rank
// talks to no one, a comm job supplies another transport's link) and the refusals, each with its
// reason. How close the predictions come to real runs is tests/bench/bench_whatif.sh's.
#include <algorithm>
#include <fstream>

#include "e2e/cluster.h"

namespace ddpd::testing {
namespace {

// Two buckets per step (the head's 1 MB over the 1 MiB first cap, then the rest), so that the
// job's own all-reduces have two sizes to fit the link to.
const std::vector<std::string> kJob = {
    "--steps",    "6",        "--warmup-steps", "1",  "--vocab",        "2048", "--d-model", "128",
    "--strategy", "bucketed", "--bucket-mb",    "25", "--spread-every", "0"};

double median_after_warmup(const nlohmann::json& steps, const char* key, int64_t warmup) {
  std::vector<double> values;
  for (const auto& s : steps) {
    if (s["step"].get<int64_t>() >= warmup) values.push_back(s[key].get<double>());
  }
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

TEST(WhatIf, ReplaysAFinishedJobThroughTheCoordinatorAndRefusesWithReasons) {
  Cluster cluster(2, "whatif");
  const std::string job = cluster.submit(kJob);
  const auto shown = cluster.wait_for_end(job);
  ASSERT_EQ(shown["state"], "SUCCEEDED") << shown.dump();

  const auto own = cluster.ctl_json({"whatif", job, "--json"});
  ASSERT_TRUE(own.contains("predicted")) << own.dump();
  // The measured column is the job's own steps after warm-up.
  EXPECT_EQ(own["measured"]["step_seconds"].get<double>(),
            median_after_warmup(shown["steps"], "step_seconds", 1));
  // The job's own configuration replays its own compute unchanged (the profile keeps the last 8
  // steps, which here are all of them).
  EXPECT_EQ(own["predicted"]["forward_seconds"].get<double>(),
            median_after_warmup(shown["steps"], "forward_seconds", 1));
  EXPECT_EQ(own["predicted"]["backward_seconds"].get<double>(),
            median_after_warmup(shown["steps"], "backward_seconds", 1));
  EXPECT_EQ(own["link"]["transport"], shown["transport"]);
  EXPECT_GT(own["link"]["seconds_per_byte"].get<double>(), 0);

  // One rank: twice the rows, on the cores the profile says the host had; nothing to talk to.
  const auto alone = cluster.ctl_json({"whatif", job, "--world-size", "1", "--json"});
  const double cores = shown["profile"]["host_cores"].get<double>();
  const double per_rank_at_2 = 2 * std::max(1.0, 2 / cores), per_rank_at_1 = 4 * 1.0;
  EXPECT_DOUBLE_EQ(
      alone["predicted"]["forward_seconds"].get<double>(),
      own["predicted"]["forward_seconds"].get<double>() * per_rank_at_1 / per_rank_at_2);
  EXPECT_EQ(alone["predicted"]["comm_seconds"].get<double>(), 0);
  EXPECT_EQ(alone["predicted"]["transport"], "none");

  // Refusals, each with its reason; bad flags name the flag (exit 2).
  auto fsdp = cluster.ctl({"whatif", job, "--strategy", "fsdp"});
  EXPECT_EQ(fsdp.exit_code, 1);
  EXPECT_NE(fsdp.err.find("fsdp is not replayed"), std::string::npos) << fsdp.err;
  auto negative = cluster.ctl({"whatif", job, "--bucket-mb", "-1"});
  EXPECT_EQ(negative.exit_code, 2);
  EXPECT_NE(negative.err.find("--bucket-mb"), std::string::npos) << negative.err;

  // Another transport needs its link measured: refused, then given by a comm job.
  const std::string other = shown["transport"] == "shm" ? "gloo" : "shm";
  auto unmeasured = cluster.ctl({"whatif", job, "--transport", other});
  EXPECT_EQ(unmeasured.exit_code, 1);
  EXPECT_NE(unmeasured.err.find("--link-from"), std::string::npos) << unmeasured.err;
  auto comm = cluster.ctl({"submit", "comm", "--world-size", "2", "--transport", other, "--sizes",
                           "256KB,1MB,4MB", "--iters", "3", "--warmup", "1"});
  ASSERT_EQ(comm.exit_code, 0) << comm.err;
  const std::string comm_job = comm.out.substr(0, comm.out.find('\n'));
  ASSERT_EQ(cluster.wait_for_end(comm_job)["state"], "SUCCEEDED");
  const auto moved =
      cluster.ctl_json({"whatif", job, "--transport", other, "--link-from", comm_job, "--json"});
  EXPECT_EQ(moved["link"]["transport"], other) << moved.dump();
  EXPECT_NE(moved["link"]["source"].get<std::string>().find(comm_job), std::string::npos);
  auto not_ddp = cluster.ctl({"whatif", comm_job});
  EXPECT_EQ(not_ddp.exit_code, 2);
  EXPECT_NE(not_ddp.err.find("is a comm job"), std::string::npos) << not_ddp.err;

  // `show --json` keeps what the replay needs: the file predicts what the coordinator does.
  const std::string file = temp_dir() + "/whatif-job.json";
  std::ofstream(file) << cluster.ctl({"show", job, "--json"}).out;
  const auto from_file =
      cluster.ctl_json({"whatif", "--from-file", file, "--bucket-mb", "1", "--json"});
  EXPECT_EQ(from_file["predicted"],
            cluster.ctl_json({"whatif", job, "--bucket-mb", "1", "--json"})["predicted"]);
}

TEST(WhatIf, ALocalRunIsReplayedFromItsJson) {
  std::vector<std::string> args{bin("ddpctl"), "local",   "--workers", "2",       "--json",
                                "ddp",         "--model", "tiny",      "--batch", "4",
                                "--context",   "16",      "--threads", "1"};
  args.insert(args.end(), kJob.begin(), kJob.end());
  const auto local = run_process(args, {}, std::chrono::seconds(120));
  ASSERT_EQ(local.exit_code, 0) << local.err;
  const std::string file = temp_dir() + "/whatif-local.json";
  std::ofstream(file) << local.out;
  const auto replay =
      run_process({bin("ddpctl"), "whatif", "--from-file", file, "--strategy", "overlap", "--json"},
                  {}, std::chrono::seconds(30));
  ASSERT_EQ(replay.exit_code, 0) << replay.err;
  const auto out = nlohmann::json::parse(replay.out);
  EXPECT_EQ(out["predicted"]["strategy"], "overlap");
  EXPECT_GT(out["predicted"]["step_seconds"].get<double>(), 0);
}

}  // namespace
}  // namespace ddpd::testing
