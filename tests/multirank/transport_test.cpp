// The shared-memory transport through the Communicator, at world 2, 3 and 4: every collective
// on sizes that straddle its chunks and do not divide by the world size, float32 and bfloat16
// (ddpd-test-rank collectives checks the values on every rank), and --transport auto choosing it
// for ranks on one host. The strategies over it: the Shm.-prefixed suites (tests/CMakeLists.txt).
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include "multirank/multirank_test_util.h"

namespace ddpd::testing {
namespace {

class ShmTransport : public ::testing::TestWithParam<int> {};

TEST_P(ShmTransport, EveryCollectiveIsExactOnOddSizesInBothDtypes) {
  const int world = GetParam();
  for (const std::string transport : {"shm", "auto"}) {
    const std::string prefix =
        temp_dir() + "/transport-" + transport + "-w" + std::to_string(world);
    const auto outcomes = run_ranks({rank_helper(), "collectives", "--out", prefix, "--transport",
                                     transport, "--batch", std::to_string(world)},
                                    world, std::chrono::seconds(120));
    for (int r = 0; r < world; ++r) {
      ASSERT_EQ(outcomes[r].exit_code, 0) << transport << " rank " << r << ":\n" << outcomes[r].err;
      const auto report = load_json(prefix + ".rank" + std::to_string(r) + ".json");
      EXPECT_EQ(report["transport"], "shm") << transport << " rank " << r;
      EXPECT_EQ(report["checks"], 5 * (2 * 4 + 2)) << "collectives checked";
      EXPECT_TRUE(report["failures"].empty()) << report["failures"].dump();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ShmTransport, ::testing::Values(2, 3, 4));

}  // namespace
}  // namespace ddpd::testing

namespace ddpd::testing {
namespace {

// A segment whose creator died before unlinking it is removed at the next worker start; one
// whose creator lives is kept.
TEST(ShmSegments, StaleOnesAreRemovedAtWorkerStart) {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  waitpid(child, nullptr, 0);  // its pid now names no process
  struct stat ns {};
  ASSERT_EQ(stat("/proc/self/ns/pid", &ns), 0);
  const std::string prefix = "/dev/shm/ddpd-shm-" + std::to_string(ns.st_ino) + "-";
  const std::string stale = prefix + std::to_string(child) + "-00000000deadbeef";
  const std::string live = prefix + std::to_string(getpid()) + "-00000000feedbeef";
  for (const auto& path : {stale, live}) std::ofstream(path) << "segment";
  const auto outcome = run_process({binary_dir() + "/ddpd-worker", "run", "comm", "--sizes", "4KB",
                                    "--iters", "1", "--warmup", "0"},
                                   {}, std::chrono::seconds(60));
  EXPECT_EQ(outcome.exit_code, 0) << outcome.err;
  EXPECT_FALSE(std::ifstream(stale).good()) << stale << " was left";
  EXPECT_TRUE(std::ifstream(live).good()) << live << " (its creator runs) was removed";
  std::remove(live.c_str());
  std::remove(stale.c_str());
}

}  // namespace
}  // namespace ddpd::testing

namespace ddpd::testing {
namespace {

// Ranks that do not share /dev/shm (as containers without ipc: host): rank 1 runs in its own
// mount namespace with a private tmpfs on /dev/shm. auto falls back to Gloo, says why, and
// trains; shm refuses, naming the rank that could not open the segment.
TEST(ShmSegments, AutoFallsBackToGlooWhenARankCannotOpenTheSegment) {
  if (geteuid() != 0) GTEST_SKIP() << "a private /dev/shm needs root (unshare --mount)";
  if (system("unshare --mount true 2>/dev/null") != 0) GTEST_SKIP() << "unshare --mount fails here";
  const std::string wrapper = temp_dir() + "/private-shm.sh";
  std::ofstream(wrapper)
      << "#!/bin/sh\n"
         "[ \"$RANK\" = 1 ] || exec \"$@\"\n"
         "exec unshare --mount sh -c 'mount -t tmpfs none /dev/shm && exec \"$0\" \"$@\"' \"$@\"\n";
  chmod(wrapper.c_str(), 0755);
  for (const std::string transport : {"auto", "shm"}) {
    const std::string prefix = temp_dir() + "/private-shm-" + transport;
    const auto outcomes = run_ranks(
        {wrapper, rank_helper(), "train", "--out", prefix, "--model", "tiny", "--context", "16",
         "--threads", "1", "--batch", "2", "--steps", "2", "--transport", transport},
        2, std::chrono::seconds(120));
    if (transport == "auto") {
      for (int r = 0; r < 2; ++r) {
        ASSERT_EQ(outcomes[r].exit_code, 0) << "rank " << r << ":\n" << outcomes[r].err;
        const auto result = load_json(prefix + ".rank" + std::to_string(r) + ".json")["result"];
        EXPECT_EQ(result["transport"], "gloo");
        EXPECT_NE(result.value("transport_note", "").find("rank 1 cannot open the segment"),
                  std::string::npos)
            << result.dump();
      }
    } else {
      EXPECT_NE(outcomes[0].exit_code, 0);
      EXPECT_NE(outcomes[0].err.find("transport shm: rank 1 cannot open the segment"),
                std::string::npos)
          << outcomes[0].err;
    }
  }
}

}  // namespace
}  // namespace ddpd::testing
