// Hardening against real daemons: admission by memory (the standalone runners and the
// coordinator refuse a job whose estimated per-rank memory exceeds the limit, naming the
// estimate and the limit), an allocation failure inside a job ends it with one line, and the
// coordinator's limits refuse what exceeds them, naming the limit.
#include <csignal>
#include <thread>

#include "e2e/cluster.h"

namespace ddpd::testing {
namespace {

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

int lines(const std::string& text) {
  int count = 0;
  for (char c : text) count += c == '\n';
  return count;
}

// The issue's example: a context of 10^8 tokens squares into exabytes of attention scores.
TEST(Admission, StandaloneRunnersRefuseAJobThatDoesNotFitInOneLine) {
  for (const std::vector<std::string>& runner :
       {std::vector<std::string>{bin("ddpd-worker"), "run", "ddp"},
        std::vector<std::string>{bin("ddpd-train")}}) {
    auto argv = runner;
    argv.insert(argv.end(), {"--model", "tiny", "--context", "100000000", "--steps", "1"});
    const auto o = run_process(argv, {}, std::chrono::seconds(60));
    EXPECT_EQ(o.exit_code, 2) << o.err;
    EXPECT_EQ(lines(o.err), 1) << o.err;
    EXPECT_EQ(o.err.rfind("error: --context: the job needs about ", 0), 0u) << o.err;
    EXPECT_NE(o.err.find("GB per rank (parameters "), std::string::npos) << o.err;
    EXPECT_NE(o.err.find("more than this machine's available memory"), std::string::npos) << o.err;
  }
}

TEST(Admission, CoordinatorRefusesAtSubmitWithTheEstimateAndTheLimit) {
  Cluster cluster(1, "admission", {}, [](int) {
    return std::vector<std::string>{"--memory-gb", "1"};
  });
  const auto refused = cluster.ctl({"submit", "ddp", "--world-size", "1", "--model", "tiny",
                                    "--context", "100000", "--batch", "1"});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("the job needs about "), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("more than the largest registered worker's memory (1.00 GB)"),
            std::string::npos)
      << refused.err;
  // A job that fits is accepted and runs.
  const auto accepted = cluster.ctl({"submit", "ddp", "--world-size", "1", "--model", "tiny",
                                     "--context", "16", "--batch", "2", "--steps", "2"});
  ASSERT_EQ(accepted.exit_code, 0) << accepted.err;
  EXPECT_EQ(cluster.wait_for_end(first_line(accepted.out))["state"], "SUCCEEDED");
}

// A worker that advertises far more memory than it has lets a job through whose embedding
// cannot be allocated (2.6 TB): the job FAILS with one line saying so, no backtrace.
TEST(Admission, AnAllocationFailureInsideAJobEndsItWithOneLine) {
  Cluster cluster(1, "oom", {}, [](int) {
    return std::vector<std::string>{"--memory-gb", "1000000000"};
  });
  const auto submitted = cluster.ctl({"submit", "ddp", "--world-size", "1", "--model", "tiny",
                                      "--vocab", "10000000000", "--steps", "1"});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  const auto job = cluster.wait_for_end(first_line(submitted.out));
  EXPECT_EQ(job["state"], "FAILED");
  const std::string reason = job["history"].back()["reason"];
  EXPECT_NE(reason.find("out of memory: "), std::string::npos) << reason;
  EXPECT_EQ(reason.find("frame #"), std::string::npos) << reason;
  EXPECT_EQ(reason.find('\n'), std::string::npos) << reason;
}

TEST(Limits, PendingJobsWatchersAndMessageSizeAreRefusedNamingTheLimit) {
  Cluster cluster(
      0, "limits",
      {"--max-pending-jobs", "2", "--max-watchers-per-job", "1", "--max-message-bytes", "65536"});
  const std::string first = cluster.submit({});
  cluster.submit({});
  const auto third = cluster.ctl({"submit", "ddp", "--world-size", "2", "--model", "tiny"});
  EXPECT_NE(third.exit_code, 0);
  EXPECT_NE(third.err.find("max_pending_jobs: 2 jobs are already pending (limit 2)"),
            std::string::npos)
      << third.err;

  // One watcher holds the pending job's stream open; a second is refused.
  BackgroundProcess watcher({bin("ddpctl"), "--coordinator", cluster.address(), "watch", first},
                            {{"DDPD_TOKEN", kToken}}, "limits-watcher");
  // It has its stream once it printed the job's first event.
  ASSERT_TRUE(cluster.wait_until([&] { return watcher.log().find("PENDING") != std::string::npos; },
                                 std::chrono::seconds(30)))
      << watcher.log();
  const auto second =
      run_process({bin("ddpctl"), "--coordinator", cluster.address(), "watch", first},
                  {{"DDPD_TOKEN", kToken}}, std::chrono::seconds(30));
  EXPECT_NE(second.exit_code, 0);
  EXPECT_NE(second.err.find("max_watchers_per_job: job " + first + " already has 1 watchers"),
            std::string::npos)
      << second.err;
  watcher.signal(SIGTERM);

  // A request over --max-message-bytes (a 100 KB data path) is refused before it is parsed.
  const auto oversized = cluster.ctl({"submit", "ddp", "--world-size", "2", "--model", "tiny",
                                      "--data", "/" + std::string(100000, 'x')});
  EXPECT_NE(oversized.exit_code, 0);
  EXPECT_NE(oversized.err.find("larger than max"), std::string::npos) << oversized.err;
}

}  // namespace
}  // namespace ddpd::testing
