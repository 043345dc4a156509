// ddpd-loadgen, small: 40 simulated workers against the real coordinator it starts. Checks the
// figures are what the run did (every rank placed, every step report sent was handled, the
// history holds every job); the figures themselves are for docs/scale.md, not pass/fail.
#include <nlohmann/json.hpp>

#include "e2e/cluster.h"

namespace ddpd::testing {
namespace {

TEST(Loadgen, SimulatedWorkersAreAllPlacedAndEveryStepReportIsHandled) {
  const auto o =
      run_process({bin("ddpd-loadgen"), "--workers", "40", "--seconds", "2", "--placement-ranks",
                   "16", "--min-ranks", "8", "--max-ranks", "16", "--history-jobs", "50", "--json"},
                  {}, std::chrono::seconds(180));
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const auto r = nlohmann::json::parse(o.out);
  std::printf("[ loadgen ] %s\n", r.dump().c_str());
  EXPECT_EQ(r["workers"], 40);
  EXPECT_EQ(r["ranks_assigned"], 40);  // 16 placed and timed, then 16 and 8
  EXPECT_EQ(r["jobs_running"], 3);
  EXPECT_GT(r["step_reports_sent"].get<int64_t>(), 0);
  EXPECT_EQ(r["step_reports_handled_total"].get<double>(),
            r["step_reports_sent_total"].get<double>());
  EXPECT_GT(r["heartbeat_count"].get<double>(), 0);
  EXPECT_GT(r["step_report_count"].get<double>(), 0);
  EXPECT_EQ(r["history_jobs"], 3 + 50);
  for (const char* key :
       {"heartbeat_p99_ms", "step_report_p99_ms", "coordinator_rss_bytes",
        "sqlite_bytes_per_million_step_reports", "place_job_ms", "list_ms", "show_ms"}) {
    EXPECT_GT(r[key].get<double>(), 0) << key;
  }
}

}  // namespace
}  // namespace ddpd::testing
