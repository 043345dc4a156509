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
