// ddpctl across a coordinator restart (issue 59, "Clients"): a read started while the coordinator
// is down succeeds once it is back, saying once that it waits; a submit made then creates one job;
// a watch whose coordinator stops mid-stream follows the job after the restart, no line twice.
// Only pending and ended jobs: none depends on the coordinator keeping a running job.
#include <future>
#include <set>

#include "e2e/cluster.h"

namespace ddpd::testing {
namespace {

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t end; (end = text.find('\n', start)) != std::string::npos; start = end + 1) {
    lines.push_back(text.substr(start, end - start));
  }
  return lines;
}

// `args` run by ddpctl in the background while the test restarts the coordinator.
std::future<ProcessOutcome> ctl_async(Cluster& cluster, std::vector<std::string> args) {
  return std::async(std::launch::async,
                    [&cluster, args = std::move(args)] { return cluster.ctl(args); });
}

const std::string kRetrying = "retrying for up to 30 s (--wait)";

TEST(ClientRetry, AListStartedWhileTheCoordinatorIsDownSucceedsOnceItIsBack) {
  Cluster cluster(0, "retry-list");
  const std::string job = cluster.submit({});  // no workers: it stays PENDING
  cluster.stop_coordinator();
  auto listed = ctl_async(cluster, {"list", "--wait", "30"});
  std::this_thread::sleep_for(std::chrono::seconds(2));  // it is retrying by now
  cluster.start_coordinator();
  const ProcessOutcome o = listed.get();
  ASSERT_EQ(o.exit_code, 0) << o.err << cluster.coordinator_log();
  EXPECT_NE(o.out.find(job), std::string::npos) << o.out;
  EXPECT_EQ(count(o.err, kRetrying), 1) << o.err;
  EXPECT_EQ(
      o.err.rfind("ddpctl: coordinator " + cluster.address() + " unavailable (UNAVAILABLE: ", 0),
      0u)
      << o.err;
}

TEST(ClientRetry, ASubmitWhileTheCoordinatorIsDownCreatesOneJob) {
  Cluster cluster(0, "retry-submit");
  cluster.stop_coordinator();
  auto submitted = ctl_async(cluster, {"submit", "ddp", "--world-size", "2", "--model", "tiny",
                                       "--batch", "4", "--context", "16", "--steps", "2"});
  std::this_thread::sleep_for(std::chrono::seconds(2));
  cluster.start_coordinator();
  const ProcessOutcome o = submitted.get();
  ASSERT_EQ(o.exit_code, 0) << o.err << cluster.coordinator_log();
  EXPECT_EQ(count(o.err, kRetrying), 1) << o.err;
  const std::string job = job_id_of(o.out);
  const auto listed = cluster.ctl({"list"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  const auto rows = lines_of(listed.out);
  ASSERT_EQ(rows.size(), 2u) << listed.out;  // the header and the one job
  EXPECT_EQ(rows[1].rfind(job + " ", 0), 0u) << listed.out;
}

TEST(ClientRetry, AWatchFollowsItsJobAcrossARestartWithNoLineTwice) {
  Cluster cluster(0, "retry-watch");
  const std::string job = cluster.submit({});  // no workers: it stays PENDING until cancelled
  auto watched = ctl_async(cluster, {"watch", job});
  // By now it has the job's first event and an open stream when the coordinator stops (were it
  // slower, its first connect would be retried instead, and the test pass all the same).
  std::this_thread::sleep_for(std::chrono::seconds(3));
  cluster.stop_coordinator();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  cluster.start_coordinator();
  ASSERT_TRUE(cluster.wait_until([&] { return cluster.ctl({"list"}).exit_code == 0; },
                                 std::chrono::seconds(30)));
  std::this_thread::sleep_for(std::chrono::seconds(3));  // the watch reconnects (pauses ≤ 2 s)
  const auto cancelled = cluster.ctl({"cancel", job});
  ASSERT_EQ(cancelled.exit_code, 0) << cancelled.err;
  const ProcessOutcome o = watched.get();
  EXPECT_EQ(o.exit_code, 1) << o.err;  // the job ended CANCELLED
  EXPECT_EQ(count(o.err, kRetrying), 1) << o.err;
  const auto lines = lines_of(o.out);
  EXPECT_EQ(std::set<std::string>(lines.begin(), lines.end()).size(), lines.size()) << o.out;
  EXPECT_EQ(count(o.out, "  PENDING  "), 1) << o.out;
  EXPECT_EQ(count(o.out, "  CANCELLED  "), 1) << o.out << o.err;
  EXPECT_NE(lines.back().find("  CANCELLED  "), std::string::npos) << o.out;
}

}  // namespace
}  // namespace ddpd::testing
