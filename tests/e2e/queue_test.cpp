// The queue as a user meets it (issue 61, item 2): a job larger than the cluster is warned about
// at submit, says why it waits in `watch`, and does not hold the jobs behind it that fit.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "e2e/cluster.h"

namespace ddpd::testing {
namespace {

TEST(Queue, AJobLargerThanTheClusterIsWarnedAboutAndDoesNotBlockOneThatFits) {
  Cluster cluster(2, "backfill");
  const auto big = cluster.ctl(
      {"submit", "ddp", "--world-size", "3", "--steps", "2", "--batch", "3", "--context", "16"});
  ASSERT_EQ(big.exit_code, 0) << big.err;  // queued all the same: a third worker may register
  const std::string big_job = job_id_of(big.out);
  EXPECT_NE(big.err.find("warning: " + big_job + " needs 3 workers offering gloo and "),
            std::string::npos)
      << big.err;
  EXPECT_NE(big.err.find(", but 2 of the 2 registered workers do: it waits until more register"),
            std::string::npos)
      << big.err;

  // Backfill: a world-2 job submitted behind it runs to the end.
  const auto fits = cluster.ctl({"submit", "ddp", "--world-size", "2", "--steps", "2", "--batch",
                                 "2", "--context", "16", "--watch"});
  EXPECT_EQ(fits.exit_code, 0) << fits.out << fits.err;
  EXPECT_NE(fits.out.find("SUCCEEDED"), std::string::npos) << fits.out;
  EXPECT_EQ(fits.err.find("warning"), std::string::npos) << fits.err;  // it fits: no warning

  const auto shown = nlohmann::json::parse(cluster.ctl({"show", big_job, "--json"}).out);
  EXPECT_EQ(shown["state"], "PENDING");
  EXPECT_EQ(shown["pending_reason"],
            "waiting for 3 idle workers offering gloo: 2 registered, 2 idle; never fits the 2 "
            "registered workers offering gloo: later jobs that fit start first");

  // watch prints each reason as it changed: both workers idle, both busy with the job that fit,
  // idle again. Cancelled, the watch ends and replays them.
  ASSERT_EQ(cluster.ctl({"cancel", big_job}).exit_code, 0);
  const auto watched = cluster.ctl({"watch", big_job});
  EXPECT_EQ(watched.exit_code, 1);  // CANCELLED
  const std::string never =
      "; never fits the 2 registered workers offering gloo: later jobs that fit start first";
  const size_t first = watched.out.find(
      "  pending  waiting for 3 idle workers offering gloo: 2 registered, 2 idle" + never);
  const size_t busy = watched.out.find(
      "  pending  waiting for 3 idle workers offering gloo: 2 registered, 0 idle" + never);
  ASSERT_NE(first, std::string::npos) << watched.out;
  ASSERT_NE(busy, std::string::npos) << watched.out;
  EXPECT_LT(first, busy) << watched.out;
  EXPECT_NE(watched.out.find("CANCELLED"), std::string::npos) << watched.out;
}

}  // namespace
}  // namespace ddpd::testing
