// Healing against real daemons (docs/healing.md): a rank lost mid-job (its process killed or
// stopped, or its worker daemon stopped) is replaced in place by an idle worker. The job SUCCEEDS
// in its first attempt, with a `heal` and a `healed` incident and no restart; the survivors' rank
// processes are the ones that started; and, with no checkpoint to read, the exported weights equal
// an uninterrupted run's byte for byte.
#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "ddpd/common/seconds_since.h"
#include "e2e/cluster.h"
#include "support/http.h"

namespace ddpd::testing {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> heal_job(int steps, int max_restarts = 1) {
  return {"--world-size",   "3",
          "--batch",        "6",
          "--steps",        std::to_string(steps),
          "--timeout",      "300",
          "--max-restarts", std::to_string(max_restarts),
          "--strategy",     "bucketed"};
}

// `flags` with `extra` after them; an --strategy in `extra` replaces the one in `flags`.
std::vector<std::string> with_extra(std::vector<std::string> flags,
                                    const std::vector<std::string>& extra) {
  const auto strategy = std::find(extra.begin(), extra.end(), "--strategy");
  const auto own = std::find(flags.begin(), flags.end(), "--strategy");
  if (strategy != extra.end() && own != flags.end()) flags.erase(own, own + 2);
  flags.insert(flags.end(), extra.begin(), extra.end());
  return flags;
}

// Waits for the job's first step report, then for its `healed` incident after `fault` runs;
// returns the seconds from the fault to that incident, and the job once it has ended.
// `on_healed` runs as soon as the incident is seen, while the job still trains.
std::pair<double, nlohmann::json> fault_and_heal(Cluster& cluster, const std::string& job,
                                                 const std::function<void()>& fault,
                                                 const std::function<void()>& on_healed = {}) {
  EXPECT_TRUE(cluster.wait_until([&] { return !cluster.show(job)["rank_steps"].empty(); },
                                 std::chrono::seconds(60)));
  fault();
  const auto at = std::chrono::steady_clock::now();
  cluster.wait_until([&] { return !events_of(cluster.show(job), "healed").empty(); },
                     std::chrono::seconds(120));
  const double seconds = seconds_since(at);
  if (on_healed) on_healed();
  return {seconds, cluster.wait_for_end(job, std::chrono::seconds(200))};
}

// Sends `sig` to the process running `rank` of `job`; false when there is none or kill fails.
bool signal_rank(Cluster& cluster, const std::string& job, int rank, int sig) {
  const int pid = rank_process_of(cluster, job, rank);
  return pid > 0 && ::kill(pid, sig) == 0;
}

void expect_one_heal(const nlohmann::json& shown, const std::string& cause) {
  ASSERT_EQ(shown["state"], "SUCCEEDED") << shown.dump();
  EXPECT_EQ(shown["attempts"], 1) << "healed in place, not restarted";
  EXPECT_TRUE(events_of(shown, "restart").empty()) << shown["events"].dump();
  const auto heals = events_of(shown, "heal");
  ASSERT_EQ(heals.size(), 1u) << shown["events"].dump();
  const std::string message = heals[0]["message"];
  EXPECT_EQ(heals[0]["rank"], 1) << message;
  EXPECT_NE(message.find(cause), std::string::npos) << message;
  EXPECT_NE(message.find(" takes rank 1 in group generation 1"), std::string::npos) << message;
  EXPECT_EQ(events_of(shown, "healed").size(), 1u) << shown["events"].dump();
}

// Ranks 0 and 2's daemons and rank processes before a fault, and the daemons' children once the
// job has healed (while it still trains): each survivor keeps the process that started the job.
struct Survivors {
  std::vector<std::pair<int, int>> before;  // (daemon pid, rank process pid)
  std::vector<std::vector<int>> once_healed;

  void record(Cluster& cluster, const std::string& job) {
    for (int rank : {0, 2}) {
      before.emplace_back(cluster.worker(worker_index_of_rank(cluster, job, rank)).pid(),
                          rank_process_of(cluster, job, rank));
    }
  }
  void record_healed() {
    for (const auto& [daemon, rank_pid] : before) once_healed.push_back(rank_process_pids(daemon));
  }
  void expect_kept() const {
    ASSERT_EQ(once_healed.size(), 2u);
    for (size_t k = 0; k < 2; ++k) {
      EXPECT_GT(before[k].second, 0);
      EXPECT_EQ(once_healed[k], std::vector<int>{before[k].second})
          << "survivor " << k << "'s rank process is not the one that started the job";
    }
  }
};

// `signal` (SIGKILL, or SIGSTOP: the rank's daemon then kills it) to rank 1's process at world 3,
// with a fourth worker idle and no checkpoint directory: the job succeeds, the survivors' rank
// processes are the ones that started it, and its exported weights equal an uninterrupted run's
// byte for byte. `extra` is added to both jobs' flags.
void expect_lost_rank_healed_bitwise(const std::string& name, const std::vector<std::string>& extra,
                                     int signal = SIGKILL) {
  const int metrics_port = unused_port();
  Cluster cluster(4, name, {"--metrics-port", std::to_string(metrics_port)});
  const std::string reference_dir = temp_dir() + "/" + name + "-reference";
  const std::string healed_dir = temp_dir() + "/" + name + "-healed";
  fs::remove_all(reference_dir);
  fs::remove_all(healed_dir);
  auto flags = with_extra(heal_job(120), extra);
  flags.insert(flags.end(), {"--export-hf", reference_dir});
  const std::string reference = cluster.submit(flags);
  ASSERT_EQ(cluster.wait_for_end(reference)["state"], "SUCCEEDED");

  flags = with_extra(heal_job(120), extra);
  flags.insert(flags.end(), {"--export-hf", healed_dir});
  const std::string job = cluster.submit(flags);
  Survivors survivors;
  const auto [seconds, shown] = fault_and_heal(
      cluster, job,
      [&] {
        survivors.record(cluster, job);
        ASSERT_TRUE(signal_rank(cluster, job, 1, signal));
      },
      [&] { survivors.record_healed(); });
  const bool stopped = signal == SIGSTOP;
  expect_one_heal(shown, stopped ? "failed: its process was stopped (SIGSTOP"
                                 : "failed: its process was killed by SIGKILL");
  std::printf("[ heal     ] %s rank 1: healed incident %.2f s after the signal; %s\n",
              stopped ? "stopped" : "killed", seconds,
              events_of(shown, "healed")[0]["message"].get<std::string>().c_str());
  survivors.expect_kept();
  // /metrics: one heal, and its time in the histogram.
  const std::string metrics = http_get(metrics_port, "/metrics").body;
  EXPECT_NE(metrics.find("\nddpd_coordinator_heals_total 1\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("\nddpd_coordinator_heal_seconds_count 1\n"), std::string::npos)
      << metrics;
  expect_same_export(reference_dir, healed_dir);
}

TEST(Heal, AKilledRankIsReplacedAndTheWeightsEqualAnUninterruptedRunsBitwise) {
  expect_lost_rank_healed_bitwise("heal-kill", {});
}

// ZeRO-1: rank 1's optimizer shard exists only in rank 2's replica (--shard-replicas 1).
TEST(Heal, AKilledZeroOneRankHealsFromItsSuccessorsReplicaBitwise) {
  expect_lost_rank_healed_bitwise("heal-kill-zero1",
                                  {"--shard-optimizer", "--shard-replicas", "1"});
}

// fsdp: rank 1's shards of parameters and moments exist only in rank 2's copy, which it steps
// with rank 1's reduced gradients, shifted to it each step (--shard-replicas 1).
TEST(Heal, AKilledFsdpRankHealsFromItsSuccessorsCopyBitwise) {
  expect_lost_rank_healed_bitwise("heal-kill-fsdp",
                                  {"--strategy", "fsdp", "--shard-replicas", "1"});
}

// The same with SIGSTOP: the stopped process's daemon kills it within two progress intervals,
// and the job heals as from a SIGKILL, its weights equal to the uninterrupted run's.
TEST(Heal, AStoppedRankIsReplacedAndTheWeightsEqualAnUninterruptedRunsBitwise) {
  expect_lost_rank_healed_bitwise("heal-stop-bitwise", {}, SIGSTOP);
}

// A rank's process stopped (SIGSTOP): its daemon kills it within two progress intervals and,
// with no other worker idle, that daemon's worker takes the rank back in the new generation.
TEST(Heal, AStoppedRankProcessIsKilledAndItsWorkerRejoinsInPlace) {
  Cluster cluster(3, "heal-stop");
  const std::string job = cluster.submit(heal_job(120));
  const auto [seconds, shown] =
      fault_and_heal(cluster, job, [&] { ASSERT_TRUE(signal_rank(cluster, job, 1, SIGSTOP)); });
  expect_one_heal(shown, "failed: its process was stopped (SIGSTOP");
  std::printf("[ heal     ] stopped rank 1: healed incident %.2f s after the SIGSTOP\n", seconds);
}

// Rank 0 serves the store: when its process is killed, the spare serves generation 1's store on
// its own rendezvous port, and the survivors meet there.
TEST(Heal, AKilledRankZeroIsReplacedAndTheStoreMovesToTheSpare) {
  Cluster cluster(4, "heal-rank0");
  const std::string job = cluster.submit(heal_job(120));
  const auto [seconds, shown] =
      fault_and_heal(cluster, job, [&] { ASSERT_TRUE(signal_rank(cluster, job, 0, SIGKILL)); });
  ASSERT_EQ(shown["state"], "SUCCEEDED") << shown.dump();
  EXPECT_TRUE(events_of(shown, "restart").empty()) << shown["events"].dump();
  const auto heals = events_of(shown, "heal");
  ASSERT_EQ(heals.size(), 1u) << shown["events"].dump();
  EXPECT_EQ(heals[0]["rank"], 0);
  EXPECT_NE(heals[0]["message"].get<std::string>().find(" takes rank 0 in group generation 1"),
            std::string::npos)
      << heals[0]["message"];
  EXPECT_EQ(events_of(shown, "healed").size(), 1u) << shown["events"].dump();
  std::printf("[ heal     ] killed rank 0: healed incident %.2f s after the SIGKILL\n", seconds);
}

// A worker daemon stopped mid-job is lost after --worker-timeout (3 s here); its rank process
// lives on, stuck, in the old group. The coordinator gives its rank to the idle fourth worker,
// and the survivors abort the old group's collectives on the HealGroup and form the new one.
// The stopped daemon's rank trains on until its event pipe (64 KiB) is full, about 160 tiny
// steps, and the job is still training when that worker is lost.
TEST(Heal, ARankWhoseWorkerIsLostIsReplacedByAnIdleWorker) {
  Cluster cluster(4, "heal-lost-worker");
  const std::string job = cluster.submit(heal_job(400));
  int stopped = -1;
  const auto [seconds, shown] = fault_and_heal(cluster, job, [&] {
    stopped = worker_index_of_rank(cluster, job, 1);
    cluster.worker(stopped).signal(SIGSTOP);
  });
  cluster.worker(stopped).signal(SIGCONT);
  expect_one_heal(shown, "(rank 1) lost: no heartbeat for ");
  std::printf(
      "[ heal     ] lost worker: healed incident %.2f s after the SIGSTOP (--worker-timeout "
      "3 s)\n",
      seconds);
}

// No idle worker, and --min-world-size 2: rank 1's worker daemon is killed (SIGKILL; its rank
// process dies with it), and the survivors go on in place as ranks 0 and 1 of 2, in the
// processes that started the job. The sample ledger, from every rank's step reports
// (first_sample, samples): no sample is trained twice; 2 rows a rank before the loss and 3
// after; every step after it has its whole batch; and before it, only the step the loss
// interrupted may lack reports (a rank that finished it may not have reported it before it went).
TEST(Heal, ALostWorkerWithNoSpareShrinksTheJobInPlaceAndTrainsEverySampleOnce) {
  constexpr int kSteps = 150, kBatch = 6;
  const std::vector<int> metrics_ports{unused_port(), unused_port(), unused_port()};
  Cluster cluster(3, "heal-shrink", {}, [&](int i) {
    return std::vector<std::string>{"--metrics-port", std::to_string(metrics_ports[i])};
  });
  auto flags = heal_job(kSteps);
  flags.insert(flags.end(), {"--min-world-size", "2"});
  const std::string job = cluster.submit(flags);
  Survivors survivors;
  int renumbered_worker = -1;  // rank 2's, which goes on as rank 1
  const auto [seconds, shown] = fault_and_heal(
      cluster, job,
      [&] {
        survivors.record(cluster, job);
        renumbered_worker = worker_index_of_rank(cluster, job, 2);
        cluster.worker(worker_index_of_rank(cluster, job, 1)).signal(SIGKILL);
      },
      [&] { survivors.record_healed(); });
  ASSERT_EQ(shown["state"], "SUCCEEDED") << shown.dump();
  EXPECT_EQ(shown["attempts"], 1) << "shrunk in place, not restarted";
  EXPECT_TRUE(events_of(shown, "restart").empty()) << shown["events"].dump();
  const auto heals = events_of(shown, "heal");
  ASSERT_EQ(heals.size(), 1u) << shown["events"].dump();
  EXPECT_EQ(heals[0]["rank"], 1);
  EXPECT_NE(heals[0]["message"].get<std::string>().find(
                "no idle worker replaces rank 1: the 2 survivors go on in group generation 1"),
            std::string::npos)
      << heals[0]["message"];
  EXPECT_EQ(shown["workers"].size(), 2u);
  // Each survivor's result under its new number: both ranks of the shrunk job succeeded.
  ASSERT_EQ(shown["ranks"].size(), 2u) << shown["ranks"].dump();
  for (const auto& rank : shown["ranks"]) EXPECT_EQ(rank["state"], "succeeded") << rank.dump();
  survivors.expect_kept();
  // The renumbered rank's worker labels its series with the new number from the shrink on.
  ASSERT_GE(renumbered_worker, 0);
  const std::string metrics = http_get(metrics_ports.at(renumbered_worker), "/metrics").body;
  EXPECT_NE(metrics.find("ddpd_steps_total{job_id=\"" + job + "\",rank=\"1\""), std::string::npos)
      << metrics;
  std::printf(
      "[ heal     ] worker of rank 1 killed, no spare: shrunk to 2 ranks, healed %.2f s "
      "after the kill\n",
      seconds);

  std::vector<int> trained(kSteps * kBatch, 0);
  std::vector<int> reports_per_step(kSteps, 0);
  int64_t first_shrunk_step = kSteps;
  for (const auto& r : shown["rank_steps"]) {
    const int64_t step = r["step"], first = r["first_sample"], samples = r["samples"];
    ASSERT_TRUE(samples == 2 || samples == 3) << r.dump();
    if (samples == 3) first_shrunk_step = std::min(first_shrunk_step, step);
    EXPECT_GE(first, step * kBatch) << r.dump();
    EXPECT_LE(first + samples, (step + 1) * kBatch) << r.dump();
    for (int64_t g = first; g < first + samples; ++g) ++trained.at(g);
    ++reports_per_step.at(step);
  }
  ASSERT_LT(first_shrunk_step, kSteps) << "no step ran at world 2";
  for (size_t g = 0; g < trained.size(); ++g) {
    EXPECT_LE(trained[g], 1) << "sample " << g << " trained twice";
  }
  int partial_steps = 0;
  for (int64_t step = 0; step < kSteps; ++step) {
    int covered = 0;
    for (int g = 0; g < kBatch; ++g) covered += trained[step * kBatch + g];
    if (step >= first_shrunk_step) {
      EXPECT_EQ(covered, kBatch) << "step " << step << " at world 2";
      EXPECT_EQ(reports_per_step[step], 2) << "step " << step;
    } else if (covered != kBatch) {
      ++partial_steps;
      EXPECT_EQ(step, first_shrunk_step - 1) << "step " << step << " lacks samples";
    }
  }
  EXPECT_LE(partial_steps, 1);
}

// Rank 0's worker daemon killed with no spare: its process served the store, so the survivors
// renumber and meet at the new rank 0's (old rank 1's) rendezvous port, and that rank writes the
// job's result.
TEST(Heal, ALostRankZeroWithNoSpareShrinksAndTheStoreMovesToTheNewRankZero) {
  Cluster cluster(3, "heal-shrink-rank0");
  auto flags = heal_job(150);
  flags.insert(flags.end(), {"--min-world-size", "2"});
  const std::string job = cluster.submit(flags);
  const auto [seconds, shown] = fault_and_heal(
      cluster, job, [&] { cluster.worker(worker_index_of_rank(cluster, job, 0)).signal(SIGKILL); });
  ASSERT_EQ(shown["state"], "SUCCEEDED") << shown.dump();
  EXPECT_TRUE(events_of(shown, "restart").empty()) << shown["events"].dump();
  const auto heals = events_of(shown, "heal");
  ASSERT_EQ(heals.size(), 1u) << shown["events"].dump();
  EXPECT_EQ(heals[0]["rank"], 0);
  EXPECT_NE(heals[0]["message"].get<std::string>().find("no idle worker replaces rank 0"),
            std::string::npos)
      << heals[0]["message"];
  EXPECT_EQ(shown["workers"].size(), 2u);
  for (const auto& rank : shown["ranks"]) EXPECT_EQ(rank["state"], "succeeded") << rank.dump();
  ASSERT_TRUE(shown.contains("heals")) << "the new rank 0 wrote no result";
  EXPECT_EQ(shown["heals"][0]["world_size"], 2);
  std::printf(
      "[ heal     ] worker of rank 0 killed, no spare: shrunk to 2 ranks, store moved, "
      "healed %.2f s after the kill\n",
      seconds);
}

// ZeRO-1 with replicas, no spare: rank 1's worker is SIGKILLed, its optimizer shard is on rank 2,
// and the survivors lay every shard out again for 2 ranks in place
// (tests/multirank/heal_core_test.cpp checks the bits against a resume at world 2).
// Sharded state with --shard-replicas 1 and no spare: the worker of rank 1 is killed, and the
// survivors lay the shards out again for 2 ranks from their own shards and copies.
void expect_sharded_shrink(const std::string& name, const std::string& what,
                           const std::vector<std::string>& sharding) {
  Cluster cluster(3, name);
  auto flags = with_extra(heal_job(150), sharding);
  flags.insert(flags.end(), {"--min-world-size", "2", "--shard-replicas", "1"});
  const std::string job = cluster.submit(flags);
  const auto [seconds, shown] = fault_and_heal(
      cluster, job, [&] { cluster.worker(worker_index_of_rank(cluster, job, 1)).signal(SIGKILL); });
  ASSERT_EQ(shown["state"], "SUCCEEDED") << shown.dump();
  EXPECT_EQ(shown["attempts"], 1) << "shrunk in place, not restarted";
  EXPECT_TRUE(events_of(shown, "restart").empty()) << shown["events"].dump();
  const auto heals = events_of(shown, "heal");
  ASSERT_EQ(heals.size(), 1u) << shown["events"].dump();
  EXPECT_NE(heals[0]["message"].get<std::string>().find("no idle worker replaces rank 1"),
            std::string::npos)
      << heals[0]["message"];
  for (const auto& rank : shown["ranks"]) EXPECT_EQ(rank["state"], "succeeded") << rank.dump();
  ASSERT_TRUE(shown.contains("heals")) << shown.dump();
  EXPECT_EQ(shown["heals"][0]["world_size"], 2);
  EXPECT_GT(shown["heals"][0]["state_bytes"].get<int64_t>(), 0) << "the shards' state moved";
  std::printf(
      "[ heal     ] %s, worker of rank 1 killed, no spare: shards laid out for 2 ranks, "
      "healed %.2f s after the kill, %lld bytes moved\n",
      what.c_str(), seconds,
      static_cast<long long>(shown["heals"][0]["state_bytes"].get<int64_t>()));
}

TEST(Heal, AZeroOneJobWithNoSpareShrinksInPlaceAndLaysItsShardsOutAgain) {
  expect_sharded_shrink("heal-shrink-zero1", "ZeRO-1", {"--shard-optimizer"});
}

// fsdp: every unit's flat layout is assembled from the survivors' shards and copies, and cut
// again for 2 ranks (state_transfer.h, steps 1f''-4f'').
TEST(Heal, AnFsdpJobWithNoSpareShrinksInPlaceAndLaysEveryUnitOutAgain) {
  expect_sharded_shrink("heal-shrink-fsdp", "fsdp", {"--strategy", "fsdp"});
}

// The worker of a `workers`-worker cluster that the job does not run on (at world 3).
int idle_worker(Cluster& cluster, const std::string& job, int workers) {
  std::set<int> used;
  for (int rank = 0; rank < 3; ++rank) used.insert(worker_index_of_rank(cluster, job, rank));
  for (int i = 0; i < workers; ++i) {
    if (!used.count(i)) return i;
  }
  return -1;
}

// Faults during a heal (docs/healing.md): whatever is lost before the `healed` incident, the
// coordinator tries no second heal (restarts are left: --max-restarts 3) and restarts the job,
// saying why; it SUCCEEDS in a second attempt, and nothing waits out --timeout (300 s): the
// ranks waiting in the new generation's rendezvous leave it as soon as they are cancelled.
void expect_restart_during_heal(const nlohmann::json& shown, const std::string& cause) {
  ASSERT_EQ(shown["state"], "SUCCEEDED") << shown.dump();
  EXPECT_EQ(events_of(shown, "heal").size(), 1u) << shown["events"].dump();
  EXPECT_TRUE(events_of(shown, "healed").empty()) << shown["events"].dump();
  const auto restarts = events_of(shown, "restart");
  ASSERT_EQ(restarts.size(), 1u) << shown["events"].dump();
  const std::string message = restarts[0]["message"];
  EXPECT_NE(message.find(cause), std::string::npos) << message;
  EXPECT_EQ(shown["attempts"], 2);
}

// Seconds from `fault_at` until the second attempt is placed (its ranks assigned), and the job
// once it has ended.
std::pair<double, nlohmann::json> until_restarted(Cluster& cluster, const std::string& job,
                                                  std::chrono::steady_clock::time_point fault_at) {
  cluster.wait_until(
      [&] {
        const auto shown = cluster.show(job);
        return shown["attempts"] == 2 && shown["state"] != "PENDING";
      },
      std::chrono::seconds(200));
  const double seconds = seconds_since(fault_at);
  return {seconds, cluster.wait_for_end(job, std::chrono::seconds(200))};
}

// A job healed twice: rank 1's process is killed, the idle worker takes rank 1, and once the
// job has healed the new rank 1 is killed too, and the first one's worker (idle again) takes it
// in group generation 2. The survivors meet the second spare under "gen2/" of the job's store
// (rendezvous.h, step 3): from generation 1's prefix they waited for it until the timeout.
TEST(Heal, ARankLostAgainAfterAHealIsHealedAgainAndTheWeightsEqualAnUninterruptedRuns) {
  const std::string name = "heal-twice";
  Cluster cluster(4, name);
  const std::string reference_dir = temp_dir() + "/" + name + "-reference";
  const std::string healed_dir = temp_dir() + "/" + name + "-healed";
  fs::remove_all(reference_dir);
  fs::remove_all(healed_dir);
  auto flags = heal_job(160, 2);
  flags.insert(flags.end(), {"--export-hf", reference_dir});
  ASSERT_EQ(cluster.wait_for_end(cluster.submit(flags))["state"], "SUCCEEDED");

  flags = heal_job(160, 2);
  flags.insert(flags.end(), {"--export-hf", healed_dir});
  const std::string job = cluster.submit(flags);
  const auto healed = [&](size_t heals) {
    return cluster.wait_until(
        [&] { return events_of(cluster.show(job), "healed").size() >= heals; },
        std::chrono::seconds(120));
  };
  ASSERT_TRUE(cluster.wait_until([&] { return !cluster.show(job)["rank_steps"].empty(); },
                                 std::chrono::seconds(60)));
  ASSERT_TRUE(signal_rank(cluster, job, 1, SIGKILL));
  ASSERT_TRUE(healed(1)) << cluster.show(job)["events"].dump();
  ASSERT_TRUE(signal_rank(cluster, job, 1, SIGKILL));
  const auto second_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(healed(2)) << cluster.show(job)["events"].dump();
  const double seconds = seconds_since(second_at);
  const auto shown = cluster.wait_for_end(job, std::chrono::seconds(200));
  ASSERT_EQ(shown["state"], "SUCCEEDED") << shown.dump();
  EXPECT_EQ(shown["attempts"], 1) << "healed in place, not restarted";
  const auto heals = events_of(shown, "heal");
  ASSERT_EQ(heals.size(), 2u) << shown["events"].dump();
  EXPECT_NE(heals[1]["message"].get<std::string>().find(" takes rank 1 in group generation 2"),
            std::string::npos)
      << heals[1]["message"];
  std::printf(
      "[ heal     ] rank 1 killed twice: the second healed incident %.2f s after its kill\n",
      seconds);
  expect_same_export(reference_dir, healed_dir);
}

// The spare's own process is killed as soon as it exists: no worker starts its rank processes
// ahead (--no-prestart-rank), so the spare's is found as it starts, before it has joined.
TEST(Heal, ASpareKilledWhileItJoinsEndsInTheRestart) {
  Cluster cluster(4, "heal-spare-dies", {},
                  [](int) { return std::vector<std::string>{"--no-prestart-rank"}; });
  const std::string job = cluster.submit(heal_job(120, 3));
  ASSERT_TRUE(cluster.wait_until([&] { return !cluster.show(job)["rank_steps"].empty(); },
                                 std::chrono::seconds(60)));
  const int spare = idle_worker(cluster, job, 4);
  ASSERT_GE(spare, 0);
  ASSERT_TRUE(signal_rank(cluster, job, 1, SIGKILL));
  const auto killed_at = std::chrono::steady_clock::now();
  int spare_pid = -1;
  ASSERT_TRUE(cluster.wait_until(
      [&] {
        const auto children = child_pids(cluster.worker(spare).pid());
        if (!children.empty()) spare_pid = children[0];
        return spare_pid > 0;
      },
      std::chrono::seconds(30)))
      << cluster.show(job).dump();
  ::kill(spare_pid, SIGKILL);
  const auto [seconds, shown] = until_restarted(cluster, job, killed_at);
  expect_restart_during_heal(shown, "after: rank 1 (worker heal-spare-dies-w" +
                                        std::to_string(spare) +
                                        ") failed: its process was killed by SIGKILL");
  EXPECT_NE(events_of(shown, "restart")[0]["message"].get<std::string>().find(
                "(during heal 1: no second heal is tried)"),
            std::string::npos);
  std::printf(
      "[ heal     ] spare killed while joining: the job restarted (placed) %.1f s after the "
      "first kill (--timeout 300 s)\n",
      seconds);
  EXPECT_LT(seconds, 120) << "a survivor waited out --timeout";
}

// Two ranks' processes killed at once: the first loss starts a heal, the second comes while it
// is under way.
TEST(Heal, ASecondRankLostWhileHealingEndsInTheRestart) {
  Cluster cluster(5, "heal-second-loss");
  const std::string job = cluster.submit(heal_job(120, 3));
  ASSERT_TRUE(cluster.wait_until([&] { return !cluster.show(job)["rank_steps"].empty(); },
                                 std::chrono::seconds(60)));
  const int first = rank_process_of(cluster, job, 1);
  const int second = rank_process_of(cluster, job, 2);
  ASSERT_GT(first, 0);
  ASSERT_GT(second, 0);
  ASSERT_EQ(::kill(first, SIGKILL), 0);
  ASSERT_EQ(::kill(second, SIGKILL), 0);
  const auto killed_at = std::chrono::steady_clock::now();
  const auto [seconds, shown] = until_restarted(cluster, job, killed_at);
  // Either loss may reach the coordinator first: the heal takes that rank, the restart names
  // the other.
  expect_restart_during_heal(shown, "(during heal 1: no second heal is tried)");
  const int healed_rank = events_of(shown, "heal")[0]["rank"];
  const std::string restart = events_of(shown, "restart")[0]["message"];
  EXPECT_NE(restart.find("after: rank " + std::to_string(3 - healed_rank) + " (worker "),
            std::string::npos)
      << restart;
  EXPECT_NE(restart.find("failed: its process was killed by SIGKILL"), std::string::npos)
      << restart;
  std::printf(
      "[ heal     ] ranks 1 and 2 killed at once: heal of rank %d, then the restart, placed "
      "%.1f s after the kills\n",
      healed_rank, seconds);
  EXPECT_LT(seconds, 120) << "a rank waited out --timeout";
}

// The survivors' state source, rank 0, exits halfway through the transfer (--inject
// exit-during-heal: after the parameters, before the AdamW moments); the ranks receiving from
// it fail naming it, and the job restarts.
TEST(Heal, TheSourceLostMidTransferEndsInTheRestart) {
  Cluster cluster(4, "heal-source-dies");
  auto flags = heal_job(120, 3);
  flags.insert(flags.end(), {"--inject", "exit-during-heal:rank=0,step=0"});
  const std::string job = cluster.submit(flags);
  ASSERT_TRUE(cluster.wait_until([&] { return !cluster.show(job)["rank_steps"].empty(); },
                                 std::chrono::seconds(60)));
  ASSERT_TRUE(signal_rank(cluster, job, 1, SIGKILL));
  const auto killed_at = std::chrono::steady_clock::now();
  const auto [seconds, shown] = until_restarted(cluster, job, killed_at);
  expect_restart_during_heal(shown, "(during heal 1: no second heal is tried)");
  // Rank 0's own report (its process exited with status 3), or a receiver's, naming rank 0.
  const std::string restart = events_of(shown, "restart")[0]["message"];
  const bool rank0_reported = restart.find("after: rank 0 (worker ") != std::string::npos &&
                              restart.find("exited with status 3") != std::string::npos;
  const bool receiver_named_it =
      restart.find("healing into group generation 1: the state transfer failed") !=
          std::string::npos &&
      restart.find("rank 0") != std::string::npos;
  EXPECT_TRUE(rank0_reported || receiver_named_it) << restart;
  std::printf(
      "[ heal     ] source exited mid-transfer: the job restarted (placed) %.1f s "
      "after rank 1's kill; %s\n",
      seconds, restart.c_str());
  EXPECT_LT(seconds, 120) << "a rank waited out --timeout";
}

// The coordinator restarts while a heal is under way: the spare's daemon is frozen (SIGSTOP)
// before rank 1 is killed, so the new generation cannot form (--worker-timeout 60 keeps the
// frozen worker from being declared lost first). The restarted coordinator adopts the job, with
// its heal still under way; the survivors claim their ranks, the frozen spare never claims its
// own, and at --adopt-timeout that loss restarts the job from its history, as any loss during a
// heal does. --adopt-timeout 15 (30 by default): the survivors' daemons were back within 7 s of
// a restart in the clean-clone suite (compose's, adoption's), and the spare's wait is 15 s shorter.
TEST(Heal, ACoordinatorRestartedWhileHealingRestartsTheJob) {
  Cluster cluster(4, "heal-coordinator", {"--worker-timeout", "60", "--adopt-timeout", "15"});
  const std::string job = cluster.submit(heal_job(120, 3));
  ASSERT_TRUE(cluster.wait_until([&] { return !cluster.show(job)["rank_steps"].empty(); },
                                 std::chrono::seconds(60)));
  const int spare = idle_worker(cluster, job, 4);
  ASSERT_GE(spare, 0);
  cluster.worker(spare).signal(SIGSTOP);
  ASSERT_TRUE(signal_rank(cluster, job, 1, SIGKILL));
  nlohmann::json during;
  ASSERT_TRUE(cluster.wait_until(
      [&] {
        during = cluster.show(job);
        return !events_of(during, "heal").empty();
      },
      std::chrono::seconds(30)));
  EXPECT_TRUE(events_of(during, "healed").empty()) << during["events"].dump();
  cluster.stop_coordinator();
  const auto restarted_at = std::chrono::steady_clock::now();
  cluster.start_coordinator();
  ASSERT_TRUE(cluster.wait_until([&] { return cluster.ctl({"list"}).exit_code == 0; },
                                 std::chrono::seconds(30)));
  const auto [seconds, shown] = until_restarted(cluster, job, restarted_at);
  expect_restart_during_heal(shown, "not claimed within --adopt-timeout 15 s");
  EXPECT_NE(events_of(shown, "restart")[0]["message"].get<std::string>().find(
                "(during heal 1: no second heal is tried)"),
            std::string::npos);
  std::printf(
      "[ heal     ] coordinator restarted during heal 1: the job restarted (placed) "
      "%.1f s after the coordinator's start\n",
      seconds);
  EXPECT_LT(seconds, 120) << "a rank waited out --timeout";
}

}  // namespace
}  // namespace ddpd::testing
