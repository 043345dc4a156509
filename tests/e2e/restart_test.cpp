// Jobs that survive, against real daemons: a rank's process that exits mid-job (--inject exit)
// under ZeRO-1, whose lost shards cannot heal in place, and a coordinator restarted mid-job. The
// coordinator restarts the job from its latest checkpoint; the job SUCCEEDS, its history shows
// the restart, and its final checkpoint is byte-for-byte the one an uninterrupted standalone run
// resumed from the same checkpoint writes. A worker stopped mid-job frees its peers' workers
// within seconds (the daemons abort the survivors' collectives on cancel). Healing in place is
// heal_daemon_test.cpp's.
#include <csignal>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "ddpd/common/seconds_since.h"
#include "e2e/cluster.h"

namespace ddpd::testing {
namespace {

namespace fs = std::filesystem;

TEST(Restart, ARankWhoseProcessExitsIsRestartedFromItsCheckpoint) {
  Cluster cluster(3, "restart-exit");
  const std::string dir = temp_dir() + "/restart-exit-ckpt";
  fs::remove_all(dir);
  // ZeRO-1: a lost rank's optimizer shards exist nowhere else, so the job restarts from its
  // checkpoint rather than healing in place (docs/healing.md; heal_daemon_test.cpp heals).
  const std::vector<std::string> common{"--batch",    "6",        "--context",        "16",
                                        "--steps",    "8",        "--threads",        "1",
                                        "--strategy", "bucketed", "--shard-optimizer"};
  std::vector<std::string> flags{"--world-size",       "2",
                                 "--checkpoint-dir",   dir,
                                 "--checkpoint-every", "2",
                                 "--max-restarts",     "1",
                                 "--inject",           "exit:rank=1,step=5"};
  flags.insert(flags.end(), common.begin(), common.end());
  const std::string job = cluster.submit(flags);
  const auto shown = cluster.wait_for_end(job);
  ASSERT_EQ(shown["state"], "SUCCEEDED") << shown.dump();
  const auto restarts = events_of(shown, "restart");
  ASSERT_EQ(restarts.size(), 1u) << shown["events"].dump();
  const std::string message = restarts[0]["message"];
  // The daemon survived its rank's exit and reported it as the rank's failure, with the status.
  EXPECT_NE(message.find("restart 1 of 1 after: rank 1 (worker "), std::string::npos) << message;
  EXPECT_NE(message.find("failed: its process exited with status 3 without a result"),
            std::string::npos)
      << message;
  const auto ended = std::chrono::steady_clock::now();
  EXPECT_TRUE(cluster.wait_until([&] { return cluster.count_workers("IDLE") == 3; },
                                 std::chrono::seconds(10)))
      << cluster.ctl({"workers"}).out;
  std::printf("[ exit     ] all 3 workers IDLE %.1f s after the job ended\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - ended).count());
  EXPECT_NE(message.find("world size 2 → 2, resuming step-4"), std::string::npos) << message;
  // The history: RUNNING, back to PENDING ("restarting after: …"), RUNNING, SUCCEEDED.
  std::vector<std::string> states;
  for (const auto& t : shown["history"]) states.push_back(t["state"]);
  EXPECT_EQ(states,
            (std::vector<std::string>{"PENDING", "RUNNING", "PENDING", "RUNNING", "SUCCEEDED"}));
  // Every step 0-7 has a record; 4 and beyond come from the second attempt.
  EXPECT_EQ(shown["attempts"], 2);
  std::set<int> steps;
  for (const auto& s : shown["rank_steps"]) {
    steps.insert(s["step"].get<int>());
    EXPECT_EQ(s["attempt"], s["step"].get<int>() >= 4 ? 1 : 0) << s.dump();
  }
  EXPECT_EQ(steps.size(), 8u);

  // Uninterrupted from the same checkpoint, standalone: the final checkpoints are identical.
  const std::string reference = temp_dir() + "/restart-exit-reference";
  fs::remove_all(reference);
  std::vector<std::string> argv{
      bin("ddpd-train"),    "--resume", dir + "/step-000004", "--checkpoint-dir", reference,
      "--checkpoint-every", "4"};
  argv.insert(argv.end(), common.begin(), common.end());
  const auto outcomes = run_ranks(argv, 2, std::chrono::seconds(120));
  for (const auto& o : outcomes) ASSERT_EQ(o.exit_code, 0) << o.err;
  for (const std::string file : {"rank-0.bin", "rank-1.bin"}) {
    const std::string a = read_file(dir + "/step-000008/" + file);
    const std::string b = read_file(reference + "/step-000008/" + file);
    ASSERT_FALSE(a.empty()) << file;
    EXPECT_TRUE(a == b) << file << " differs from the uninterrupted run's";
  }
}

// --no-adopt: the path before adoption, still offered (adoption_test.cpp has the default).
TEST(Restart, WithoutAdoptionACoordinatorRestartMidJobRestartsTheJob) {
  Cluster cluster(2, "restart-coordinator", {"--no-adopt"});
  const std::string dir = temp_dir() + "/restart-coordinator-ckpt";
  fs::remove_all(dir);
  const std::string job =
      cluster.submit({"--world-size", "2", "--batch", "6", "--steps", "60", "--checkpoint-dir", dir,
                      "--checkpoint-every", "5", "--keep-checkpoints", "2", "--max-restarts", "1"});
  ASSERT_TRUE(
      cluster.wait_until([&] { return fs::exists(dir + "/latest"); }, std::chrono::seconds(60)));
  cluster.stop_coordinator();
  cluster.start_coordinator();
  ASSERT_TRUE(cluster.wait_until([&] { return cluster.ctl({"list"}).exit_code == 0; },
                                 std::chrono::seconds(30)));
  const auto shown = cluster.wait_for_end(job);
  ASSERT_EQ(shown["state"], "SUCCEEDED") << shown.dump() << cluster.coordinator_log();
  const auto restarts = events_of(shown, "restart");
  ASSERT_EQ(restarts.size(), 1u) << shown["events"].dump();
  EXPECT_NE(restarts[0]["message"].get<std::string>().find("after: coordinator restarted"),
            std::string::npos);
}

// ddpctl resume continues a finished job's checkpoint as a new job at another world size and
// strategy; both histories name the link.
TEST(Resume, DdpctlResumeContinuesAtAnotherWorldSizeAndStrategy) {
  Cluster cluster(3, "resume-cli");
  const std::string dir = temp_dir() + "/resume-cli-ckpt";
  fs::remove_all(dir);
  const std::string first =
      cluster.submit({"--world-size", "2", "--batch", "6", "--steps", "4", "--strategy", "fsdp",
                      "--checkpoint-dir", dir, "--checkpoint-every", "2"});
  ASSERT_EQ(cluster.wait_for_end(first)["state"], "SUCCEEDED");
  const auto o =
      cluster.ctl({"resume", first, "--world-size", "3", "--strategy", "bucketed", "--steps", "8"});
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const std::string second = o.out.substr(0, o.out.find('\n'));
  const auto shown = cluster.wait_for_end(second);
  ASSERT_EQ(shown["state"], "SUCCEEDED") << shown.dump();
  EXPECT_EQ(shown["world_size"], 3);
  EXPECT_NE(shown["history"][0]["reason"].get<std::string>().find("resumes " + first),
            std::string::npos);
  std::set<int> steps;
  for (const auto& s : shown["rank_steps"]) steps.insert(s["step"].get<int>());
  EXPECT_EQ(steps, (std::set<int>{4, 5, 6, 7})) << "steps 5-8 only";
  const auto resumed = events_of(cluster.show(first), "resumed");
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_NE(resumed[0]["message"].get<std::string>().find("resumed as " + second),
            std::string::npos);
  EXPECT_TRUE(fs::exists(dir + "/step-000008/metadata.json"));
}

// A worker stopped mid-job (SIGSTOP: its rank neither exits nor closes a connection) is
// silent; once its job has not advanced for --worker-timeout (3 s here) it is lost, and the
// survivors, blocked in a collective with it, are aborted by their daemons on the coordinator's
// cancel: IDLE within seconds of the stop, where they used to wait out --timeout (300 s here).
// (With --max-restarts and an idle worker the rank is healed in place instead:
// heal_daemon_test.cpp.)
TEST(Supervision, AStoppedRanksSurvivorsAreFreed) {
  const auto job_flags = [](int steps) {
    return std::vector<std::string>{"--world-size",        "3",         "--batch", "6", "--steps",
                                    std::to_string(steps), "--timeout", "300"};
  };
  {
    Cluster cluster(3, "stopped");
    const std::string job = cluster.submit(job_flags(400));
    ASSERT_TRUE(cluster.wait_until([&] { return !cluster.show(job)["rank_steps"].empty(); },
                                   std::chrono::seconds(60)));
    const int stopped = worker_index_of_rank(cluster, job, 1);
    cluster.worker(stopped).signal(SIGSTOP);
    const auto stopped_at = std::chrono::steady_clock::now();
    const bool freed = cluster.wait_until(
        [&] {
          return cluster.show(job)["state"] == "FAILED" && cluster.count_workers("IDLE") == 2;
        },
        std::chrono::seconds(60));
    const double seconds = seconds_since(stopped_at);
    cluster.worker(stopped).signal(SIGCONT);
    ASSERT_TRUE(freed) << cluster.ctl({"workers"}).out << cluster.show(job).dump();
    std::printf("[ stopped  ] survivors IDLE %.1f s after the SIGSTOP (--worker-timeout 3 s)\n",
                seconds);
    // The stopped daemon's rank trains on until its event pipe (64 KiB) is full, about 160 tiny
    // steps (5 s alone on 2 cores, more beside other tests): the job stops advancing then, and
    // the loss comes --worker-timeout after. Far from --timeout all the same.
    EXPECT_LT(seconds, 120) << cluster.ctl({"workers"}).out;
    const std::string error = cluster.show(job)["error"];
    EXPECT_NE(error.find("(rank 1) lost: no heartbeat for "), std::string::npos) << error;
  }
}

}  // namespace
}  // namespace ddpd::testing

namespace ddpd::testing {
namespace {

// A rank's process killed as the out-of-memory killer kills (SIGKILL) is that rank's failure,
// named with the signal; its daemon lives on, and every worker is IDLE again at once.
TEST(Supervision, ARankProcessKilledLikeTheOomKillerFailsItsRankNotItsDaemon) {
  Cluster cluster(2, "rank-killed");
  const std::string job = cluster.submit({"--world-size", "2", "--batch", "6", "--steps", "400"});
  ASSERT_TRUE(cluster.wait_until([&] { return !cluster.show(job)["rank_steps"].empty(); },
                                 std::chrono::seconds(60)));
  const int rank_pid = rank_process_of(cluster, job, 1);
  ASSERT_GT(rank_pid, 0);
  ASSERT_EQ(::kill(rank_pid, SIGKILL), 0);
  const auto killed_at = std::chrono::steady_clock::now();
  const bool freed = cluster.wait_until(
      [&] { return cluster.show(job)["state"] == "FAILED" && cluster.count_workers("IDLE") == 2; },
      std::chrono::seconds(30));
  const double seconds = seconds_since(killed_at);
  ASSERT_TRUE(freed) << cluster.ctl({"workers"}).out << cluster.show(job).dump();
  std::printf("[ killed   ] job FAILED and both workers IDLE %.1f s after the SIGKILL\n", seconds);
  const std::string error = cluster.show(job)["error"];
  EXPECT_EQ(error.rfind("rank 1 (worker ", 0), 0u) << error;
  EXPECT_NE(error.find("failed: its process was killed by SIGKILL (the out-of-memory killer"),
            std::string::npos)
      << error;
  // The daemon that ran it takes the next job.
  const std::string next = cluster.submit({"--world-size", "2", "--batch", "6", "--steps", "3"});
  EXPECT_EQ(cluster.wait_for_end(next)["state"], "SUCCEEDED");
}

// The rank process a daemon keeps started ahead (worker_daemon.h, prestart_rank): an idle daemon
// has one waiting, not yet named ddpd-rank, and its next assignment runs in it; the daemon starts
// another once idle again; one that died while it waited is replaced at the assignment.
// --no-prestart-rank keeps none.
TEST(Supervision, AnIdleDaemonKeepsItsNextRankProcessWaitingAndTheNextJobRunsInIt) {
  Cluster cluster(2, "prestart", {}, [](int i) {
    return i == 1 ? std::vector<std::string>{"--no-prestart-rank"} : std::vector<std::string>{};
  });
  const int daemon = cluster.worker(0).pid();
  const auto waiting_child = [&] {
    const auto children = child_pids(daemon);
    return children.size() == 1 && rank_process_pids(daemon).empty() ? children[0] : -1;
  };
  int waiting = -1;
  ASSERT_TRUE(cluster.wait_until([&] { return (waiting = waiting_child()) > 0; },
                                 std::chrono::seconds(30)));
  EXPECT_TRUE(child_pids(cluster.worker(1).pid()).empty()) << "--no-prestart-rank";

  const std::string job = cluster.submit({"--world-size", "2", "--batch", "6", "--steps", "30"});
  ASSERT_TRUE(cluster.wait_until([&] { return !cluster.show(job)["rank_steps"].empty(); },
                                 std::chrono::seconds(60)));
  const int rank = worker_index_of_rank(cluster, job, 0) == 0 ? 0 : 1;
  EXPECT_EQ(rank_process_of(cluster, job, rank), waiting)
      << "rank " << rank << " did not run in the process started ahead";
  EXPECT_EQ(cluster.wait_for_end(job)["state"], "SUCCEEDED");

  // Idle again (worker_daemon.h: prestart_idle_seconds, 5 s), it starts the next one.
  int next = -1;
  ASSERT_TRUE(
      cluster.wait_until([&] { return (next = waiting_child()) > 0; }, std::chrono::seconds(30)));
  EXPECT_NE(next, waiting);
  ASSERT_EQ(::kill(next, SIGKILL), 0);
  const std::string after = cluster.submit({"--world-size", "2", "--batch", "6", "--steps", "3"});
  EXPECT_EQ(cluster.wait_for_end(after)["state"], "SUCCEEDED") << cluster.show(after).dump();
}

}  // namespace
}  // namespace ddpd::testing
