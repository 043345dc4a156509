// The control plane can fail (docs/reliability.md), against real daemons: a coordinator killed
// mid-job and started again on the same --db, one stopped past --worker-timeout, one worker's
// link cut through a loopback proxy. The job goes on in its first attempt: no rank process is
// started again, every (rank, step) report is stored once, and the exported weights equal an
// uninterrupted run's byte for byte. Faults during the outage (a rank killed, a job that ends),
// a claim the coordinator cannot know, and a rank orphaned past --orphan-timeout.
#include <unistd.h>

#include <regex>
#include <set>

#include "e2e/cluster.h"
#include "support/tcp_proxy.h"

namespace ddpd::testing {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A job that outlives an outage by time rather than by work: rank 0's compute is stretched 8
// times (--inject slow, a sleep after the backward: the arithmetic is unchanged, so the export
// still equals an unslowed run's byte for byte) and the other ranks wait for it in the
// collective, yielding and napping (shm_process_group.cpp). A sixth of the steps last about as
// long as before (a tiny step is mostly forward and backward), and the CPU the ranks no longer
// burn goes to the tests beside them under ctest -j2 (the seven tests using it, alone on 2 busy
// cores: 806 CPU-seconds before, 189 after).
// --straggler-threshold 0: the slowed rank is not the straggler these tests look for.
const std::vector<std::string> kOutliving{"--inject", "slow:rank=0,step=0,factor=8",
                                          "--straggler-threshold", "0"};

// --steps `steps`, outliving an outage (kOutliving).
std::vector<std::string> outliving(int steps) {
  std::vector<std::string> flags{"--steps", std::to_string(steps)};
  flags.insert(flags.end(), kOutliving.begin(), kOutliving.end());
  return flags;
}

// A job of `steps` (tiny model: a few ms a step on 2 cores), exported to `export_dir`.
std::vector<std::string> long_job(int world, const std::string& strategy, int steps,
                                  const std::string& export_dir) {
  return {"--world-size", std::to_string(world), "--strategy",  strategy,  "--batch", "6",
          "--steps",      std::to_string(steps), "--export-hf", export_dir};
}

// long_job, outliving an outage (kOutliving).
std::vector<std::string> outliving_job(int world, const std::string& strategy, int steps,
                                       const std::string& export_dir) {
  std::vector<std::string> flags = long_job(world, strategy, steps, export_dir);
  flags.insert(flags.end(), kOutliving.begin(), kOutliving.end());
  return flags;
}

// Worker daemons that log each rank process they start ("runs in process PID", at info).
std::vector<std::string> info_logs(int) { return {"--log-level", "info"}; }

// Waits until the job has stored step reports (it trains).
void wait_for_steps(Cluster& cluster, const std::string& job) {
  ASSERT_TRUE(
      cluster.wait_until([&] { return !cluster.show(job)["rank_steps"].empty(); }, seconds(120)));
}

// Each rank's process, by rank.
std::vector<int> rank_pids(Cluster& cluster, const std::string& job, int world) {
  std::vector<int> pids;
  for (int rank = 0; rank < world; ++rank) pids.push_back(rank_process_of(cluster, job, rank));
  return pids;
}

// The processes a worker daemon's log says it started for `job` ("runs in process PID").
std::vector<int> started_for(Cluster& cluster, int worker, const std::string& job) {
  const std::string log = cluster.worker(worker).log();
  const std::regex line("job=" + job + " rank=\\d+ runs in process (\\d+)");
  std::vector<int> pids;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), line); it != std::sregex_iterator();
       ++it) {
    pids.push_back(std::stoi((*it)[1]));
  }
  return pids;
}

// Whether no daemon of the first `workers` runs a rank process any more.
bool no_rank_processes(Cluster& cluster, int workers) {
  for (int w = 0; w < workers; ++w) {
    if (!rank_process_pids(cluster.worker(w).pid()).empty()) return false;
  }
  return true;
}

// The job succeeded in its first attempt, and every rank reported every step exactly once.
void expect_no_step_lost(const nlohmann::json& shown, int world, int steps) {
  ASSERT_EQ(shown["state"], "SUCCEEDED") << shown.dump().substr(0, 4000);
  EXPECT_EQ(shown["attempts"], 1);
  EXPECT_TRUE(events_of(shown, "restart").empty()) << shown["events"].dump();
  std::set<std::pair<int, int>> seen;
  for (const auto& s : shown["rank_steps"]) {
    EXPECT_TRUE(seen.insert({s["rank"].get<int>(), s["step"].get<int>()}).second)
        << "rank " << s["rank"] << " step " << s["step"] << " stored twice";
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(world * steps)) << "reports lost";
}

// kill -9 of the coordinator mid-job and a new one on the same --db 5 s later. The uninterrupted
// reference runs at the same time on a cluster of its own (its coordinator is never killed): the
// adopted job's ranks mostly sleep (kOutliving), so it adds little to the adopted job's time where
// it used to come before it. World2Bucketed alone on 2 busy cores: 166-222 s before both, 46 s
// after.
void expect_coordinator_kill_adopted(int world, const std::string& strategy, int steps) {
  const std::string name = "adopt-" + strategy + std::to_string(world);
  Cluster cluster(world, name, {}, info_logs);
  Cluster reference_cluster(world, name + "-ref");
  const std::string reference_dir = temp_dir() + "/" + name + "-reference";
  const std::string adopted_dir = temp_dir() + "/" + name + "-adopted";
  fs::remove_all(reference_dir);
  fs::remove_all(adopted_dir);
  const std::string reference =
      reference_cluster.submit(long_job(world, strategy, steps, reference_dir));
  const std::string job = cluster.submit(outliving_job(world, strategy, steps, adopted_dir));
  wait_for_steps(cluster, job);
  const std::vector<int> pids = rank_pids(cluster, job, world);
  const size_t reports_before = cluster.show(job)["rank_steps"].size();
  cluster.kill_coordinator();
  std::this_thread::sleep_for(seconds(5));
  const double restarted = unix_now();
  cluster.start_coordinator();
  const auto shown = cluster.wait_for_end(job, seconds(300));
  expect_no_step_lost(shown, world, steps);
  const auto adopted = events_of(shown, "adopted");
  ASSERT_EQ(adopted.size(), 1u) << shown["events"].dump();
  EXPECT_EQ(adopted[0]["rank"], -1);
  // No rank process started again: each daemon started one for the job, the one seen before.
  for (int rank = 0; rank < world; ++rank) {
    EXPECT_EQ(started_for(cluster, worker_index_of_rank(cluster, job, rank), job),
              std::vector<int>{pids[rank]});
  }
  const double adopted_at = adopted[0]["unix_time"].get<double>();
  std::printf(
      "[ adopt    ] world %d %s: coordinator killed after %zu reports, back 5 s later; "
      "adopted %.1f s after it started, the job ended %.1f s after that (%s)\n",
      world, strategy.c_str(), reports_before, adopted_at - restarted,
      shown["history"].back()["unix_time"].get<double>() - adopted_at,
      adopted[0]["message"].get<std::string>().c_str());
  ASSERT_EQ(reference_cluster.wait_for_end(reference, seconds(300))["state"], "SUCCEEDED");
  expect_same_export(reference_dir, adopted_dir);
}

// Steps: a sixth of what outlived the outage unslowed (1500, 1000, 1000, 800), as kOutliving
// makes each step about 6 times as long.
TEST(Adoption, ACoordinatorKilledMidJobIsAdoptedAtWorld2Bucketed) {
  expect_coordinator_kill_adopted(2, "bucketed", 250);
}
TEST(Adoption, ACoordinatorKilledMidJobIsAdoptedAtWorld3Bucketed) {
  expect_coordinator_kill_adopted(3, "bucketed", 170);
}
TEST(Adoption, ACoordinatorKilledMidJobIsAdoptedAtWorld2Fsdp) {
  expect_coordinator_kill_adopted(2, "fsdp", 170);
}
TEST(Adoption, ACoordinatorKilledMidJobIsAdoptedAtWorld3Fsdp) {
  expect_coordinator_kill_adopted(3, "fsdp", 135);
}

// SIGSTOP of the coordinator for twice --worker-timeout (3 s here), then SIGCONT: its own pause
// is no worker's silence, and nothing is restarted.
TEST(Adoption, ACoordinatorStoppedPastTheWorkerTimeoutLosesNoRank) {
  Cluster cluster(2, "adopt-sigstop", {}, info_logs);
  const int steps = 170;  // 1000 unslowed (kOutliving)
  const std::string job = cluster.submit(outliving(steps));
  wait_for_steps(cluster, job);
  const std::vector<int> pids = rank_pids(cluster, job, 2);
  ::kill(cluster.coordinator_pid(), SIGSTOP);
  std::this_thread::sleep_for(seconds(6));
  ::kill(cluster.coordinator_pid(), SIGCONT);
  const auto shown = cluster.wait_for_end(job, seconds(300));
  expect_no_step_lost(shown, 2, steps);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(started_for(cluster, worker_index_of_rank(cluster, job, rank), job),
              std::vector<int>{pids[rank]});
  }
  // The pause was the coordinator's own: no worker was taken for silent.
  EXPECT_TRUE(events_of(shown, "adopted").empty()) << shown["events"].dump();
}

// One worker's link to the coordinator cut for 10 s through a proxy, while the coordinator and
// the data plane live: the worker is DISCONNECTED, not lost, and claims its rank again.
TEST(Adoption, AWorkersLinkCutForTenSecondsLosesNoStep) {
  Cluster cluster(1, "adopt-link");
  TcpProxy proxy(std::stoi(cluster.address().substr(cluster.address().rfind(':') + 1)));
  cluster.route_worker(1, proxy.port());
  cluster.start_worker(1);
  ASSERT_TRUE(cluster.wait_until([&] { return cluster.count_workers("IDLE") == 2; }, seconds(30)));
  const int steps = 500;  // 3000 unslowed (kOutliving)
  const std::string job = cluster.submit(outliving(steps));
  wait_for_steps(cluster, job);
  proxy.cut();
  const double cut_at = unix_now();
  EXPECT_TRUE(
      cluster.wait_until([&] { return cluster.count_workers("DISCONNECTED") == 1; }, seconds(5)))
      << cluster.ctl({"workers"}).out;
  std::this_thread::sleep_for(seconds(10) - seconds(static_cast<int>(unix_now() - cut_at)));
  EXPECT_EQ(cluster.show(job)["state"], "RUNNING");
  proxy.restore();
  const auto shown = cluster.wait_for_end(job, seconds(300));
  expect_no_step_lost(shown, 2, steps);
  const auto adopted = events_of(shown, "adopted");
  ASSERT_EQ(adopted.size(), 1u) << shown["events"].dump();
  EXPECT_EQ(adopted[0]["rank"], worker_index_of_rank(cluster, job, 0) == 1 ? 0 : 1);
  std::printf("[ link     ] %s\n", adopted[0]["message"].get<std::string>().c_str());
}

// A rank killed while the coordinator is down is healed once it is back: its daemon kept the
// rank's result, and the survivors wait for their new group.
TEST(Adoption, ARankKilledDuringTheOutageIsHealedAfterAdoption) {
  Cluster cluster(4, "adopt-heal");
  // 135 steps: 800 unslowed (kOutliving; rank 0 is slowed, rank 1 killed).
  std::vector<std::string> flags{"--world-size",   "3", "--batch",   "6",
                                 "--max-restarts", "1", "--timeout", "300"};
  const std::vector<std::string> slow = outliving(135);
  flags.insert(flags.end(), slow.begin(), slow.end());
  const std::string job = cluster.submit(flags);
  wait_for_steps(cluster, job);
  const int victim = rank_process_of(cluster, job, 1);
  ASSERT_GT(victim, 0);
  cluster.kill_coordinator();
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  std::this_thread::sleep_for(seconds(3));
  cluster.start_coordinator();
  const auto shown = cluster.wait_for_end(job, seconds(300));
  ASSERT_EQ(shown["state"], "SUCCEEDED") << shown["events"].dump() << cluster.coordinator_log();
  EXPECT_EQ(shown["attempts"], 1);
  EXPECT_TRUE(events_of(shown, "restart").empty()) << shown["events"].dump();
  ASSERT_EQ(events_of(shown, "heal").size(), 1u) << shown["events"].dump();
  EXPECT_NE(events_of(shown, "heal")[0]["message"].get<std::string>().find("SIGKILL"),
            std::string::npos);
}

// A job whose ranks finish while the coordinator is down is recorded with its real end.
TEST(Adoption, AJobThatEndsDuringTheOutageIsRecordedWithItsRealEnd) {
  Cluster cluster(2, "adopt-ended");
  const std::string job = cluster.submit({"--steps", "300"});
  wait_for_steps(cluster, job);
  cluster.kill_coordinator();
  ASSERT_TRUE(cluster.wait_until([&] { return no_rank_processes(cluster, 2); }, seconds(120)));
  std::this_thread::sleep_for(seconds(1));
  const double restarted = unix_now();
  cluster.start_coordinator();
  const auto shown = cluster.wait_for_end(job, seconds(60));
  expect_no_step_lost(shown, 2, 300);
  const double ended = shown["history"].back()["unix_time"];
  EXPECT_LT(ended, restarted) << "the end is the ranks', not the restarted coordinator's";
}

// A coordinator that does not know the job (a new, empty store): each claim is refused and its
// rank stopped, so no training goes on unseen.
TEST(Adoption, AClaimForAnUnknownJobStopsThatRank) {
  Cluster cluster(2, "adopt-unknown");
  const std::string job = cluster.submit({"--steps", "100000"});
  wait_for_steps(cluster, job);
  cluster.kill_coordinator();
  cluster.use_db(temp_dir() + "/adopt-unknown-other.db");
  fs::remove(temp_dir() + "/adopt-unknown-other.db");
  cluster.start_coordinator();
  EXPECT_TRUE(cluster.wait_until(
      [&] { return cluster.count_workers("IDLE") == 2 && no_rank_processes(cluster, 2); },
      seconds(60)))
      << cluster.coordinator_log();
  EXPECT_NE(cluster.coordinator_log().find("of " + job + " (attempt 0): refused, no such job"),
            std::string::npos)
      << cluster.coordinator_log();
}

// A rank whose daemon has had no coordinator for --orphan-timeout stops after its next
// checkpoint, and its peers stop after the same one, also a peer whose own daemon has not yet
// asked (worker 0's timeout is the default 600 s): nothing trained is lost, and no rank is left
// in a collective with one that has gone. Orphaned daemons ask up to a heartbeat apart, and 50
// steps of this model take about 0.1 s, so without the ranks' agreement at each checkpoint the
// asked rank left alone (it did in 4 of 7 runs with both timeouts at 2 s).
TEST(Adoption, AnOrphanedRankStopsAfterWritingItsNextCheckpointAndItsPeersWithIt) {
  Cluster cluster(2, "adopt-orphan", {}, [](int i) {
    return i == 1 ? std::vector<std::string>{"--orphan-timeout", "2"} : std::vector<std::string>{};
  });
  const std::string dir = temp_dir() + "/adopt-orphan-ckpt";
  fs::remove_all(dir);
  const std::string job =
      cluster.submit({"--steps", "1000000", "--checkpoint-dir", dir, "--checkpoint-every", "50"});
  wait_for_steps(cluster, job);
  cluster.kill_coordinator();
  ASSERT_TRUE(cluster.wait_until([&] { return no_rank_processes(cluster, 2); }, seconds(90)));
  // The daemon logs its rank's end after the process is gone: wait for the lines, not the exit.
  const std::regex stopped(
      "orphaned: stopped after writing the checkpoint of step (\\d+) \\(([^)]*)\\)");
  std::smatch asked, peer;
  std::string asked_log, peer_log;
  ASSERT_TRUE(cluster.wait_until(
      [&] {
        asked_log = cluster.worker(1).log();
        peer_log = cluster.worker(0).log();
        return std::regex_search(asked_log, asked, stopped) &&
               std::regex_search(peer_log, peer, stopped);
      },
      seconds(30)))
      << "worker 1:\n"
      << asked_log << "\nworker 0:\n"
      << peer_log;
  EXPECT_EQ(asked[1], peer[1]) << "both ranks stop after the same checkpoint";
  EXPECT_EQ(asked[2], "no coordinator for --orphan-timeout");
  EXPECT_NE(peer[2].str().find("'s worker had no coordinator for --orphan-timeout"),
            std::string::npos)
      << peer[2];
  EXPECT_NE(asked_log.find("the rank stops after its next checkpoint"), std::string::npos);
  EXPECT_EQ(peer_log.find("the rank stops after its next checkpoint"), std::string::npos);
  char name[32];
  std::snprintf(name, sizeof(name), "/step-%06d", std::stoi(asked[1]));
  EXPECT_TRUE(fs::exists(dir + name + "/metadata.json")) << dir + name;
}

}  // namespace
}  // namespace ddpd::testing
