// The shared-memory transport through the Communicator, at world 2, 3 and 4: every collective
// on sizes that straddle its chunks and do not divide by the world size, float32 and bfloat16
// (ddpd-test-rank collectives checks the values on every rank), also on buffers every rank maps
// (Communicator::allocate_collective_buffer, read in place), whole and at an offset, and
// --transport auto choosing it for ranks on one host. The strategies over it: the default runs
// (auto picks it here); over Gloo: the Gloo.-prefixed suites (tests/CMakeLists.txt).
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
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
      // Per size: 8 per dtype (the reduce-scatter that keeps the predecessor's sum checks both
      // its outputs), 3 in float32; then 3 module broadcasts of 5 tensors.
      EXPECT_EQ(report["checks"], 5 * (2 * 8 + 3) + 3 * 5) << "collectives checked";
      EXPECT_TRUE(report["keeps_predecessor"]) << "shm's reduce-scatter keeps the predecessor's";
      EXPECT_TRUE(report["shared_in_place"])
          << "buffers from allocate_collective_buffer are shared";
      EXPECT_TRUE(report["failures"].empty()) << report["failures"].dump();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ShmTransport, ::testing::Values(2, 3, 4));

// One rank's /dev/shm refuses its collective buffer (its file-size limit lowered: EFBIG from
// the ftruncate that sizes it, a real failure of the call): every rank falls back to private memory
// and names that rank, the step and the errno; the all-reduce stays exact, and the next allocation
// is shared again.
TEST(ShmSharedBuffers, ARankThatCannotCreateItsBufferIsNamedAndEveryRankFallsBack) {
  constexpr int kWorld = 3, kFailing = 1;
  const std::string prefix = temp_dir() + "/shared-fallback";
  const auto outcomes =
      run_ranks({rank_helper(), "shared-fallback", "--out", prefix, "--transport", "shm", "--batch",
                 std::to_string(kWorld), "--failing-rank", std::to_string(kFailing)},
                kWorld, std::chrono::seconds(60));
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_EQ(outcomes[r].exit_code, 0) << "rank " << r << ":\n" << outcomes[r].err;
    const auto report = load_json(prefix + ".rank" + std::to_string(r) + ".json");
    EXPECT_FALSE(report["in_place"]) << "rank " << r;
    ASSERT_TRUE(report.contains("fallback")) << "rank " << r;
    EXPECT_EQ(report["fallback"]["rank"], kFailing) << "rank " << r;
    EXPECT_EQ(report["fallback"]["step"], "create") << "rank " << r;
    EXPECT_EQ(report["fallback"]["errno"], EFBIG) << "rank " << r;
    EXPECT_EQ(report["fallback"]["peer"], -1) << "rank " << r;
    EXPECT_FALSE(report.contains("next_fallback")) << "a shared allocation clears the reason";
    EXPECT_TRUE(report["sum_exact"]) << "rank " << r;
    EXPECT_TRUE(report["next_in_place"]) << "rank " << r;
  }
}

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

// A /dev/shm the segment cannot use, made with a private tmpfs in a mount namespace of its own
// for the ranks that `private_ranks` matches (a sh pattern), mounted with `mount_options`.
struct UnusableShm {
  std::string name;
  std::string private_ranks;
  std::string mount_options;
  std::string reason;  // what the transport note and shm's refusal must say
};

void PrintTo(const UnusableShm& c, std::ostream* os) { *os << c.name; }

class ShmUnusable : public ::testing::TestWithParam<UnusableShm> {};

// auto falls back to Gloo on every rank, says why, and trains; shm refuses with the same reason.
TEST_P(ShmUnusable, AutoFallsBackToGlooAndShmRefusesNamingTheRank) {
  const UnusableShm c = GetParam();
  if (geteuid() != 0) GTEST_SKIP() << "a private /dev/shm needs root (unshare --mount)";
  if (system("unshare --mount true 2>/dev/null") != 0) GTEST_SKIP() << "unshare --mount fails here";
  const std::string wrapper = temp_dir() + "/private-shm-" + c.name + ".sh";
  std::ofstream(wrapper) << "#!/bin/sh\n"
                         << "case \"$RANK\" in " << c.private_ranks
                         << ") ;; *) exec \"$@\" ;; esac\n"
                         << "exec unshare --mount sh -c 'mount -t tmpfs -o " << c.mount_options
                         << " none /dev/shm && exec \"$0\" \"$@\"' \"$@\"\n";
  chmod(wrapper.c_str(), 0755);
  for (const std::string transport : {"auto", "shm"}) {
    const std::string prefix = temp_dir() + "/private-shm-" + c.name + "-" + transport;
    const auto outcomes = run_ranks(
        {wrapper, rank_helper(), "train", "--out", prefix, "--model", "tiny", "--context", "16",
         "--threads", "1", "--batch", "2", "--steps", "2", "--transport", transport},
        2, std::chrono::seconds(120));
    if (transport == "auto") {
      for (int r = 0; r < 2; ++r) {
        ASSERT_EQ(outcomes[r].exit_code, 0) << "rank " << r << ":\n" << outcomes[r].err;
        const auto result = load_json(prefix + ".rank" + std::to_string(r) + ".json")["result"];
        EXPECT_EQ(result["transport"], "gloo");
        EXPECT_NE(result.value("transport_note", "").find(c.reason), std::string::npos)
            << result.dump();
      }
    } else {
      EXPECT_NE(outcomes[0].exit_code, 0);
      EXPECT_NE(outcomes[0].err.find("transport shm: " + c.reason), std::string::npos)
          << outcomes[0].err;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ShmUnusable,
    ::testing::Values(
        // Ranks that do not share /dev/shm (a container without ipc: host): rank 1's own.
        UnusableShm{"NotShared", "1", "size=64m", "rank 1 cannot open the segment"},
        // A /dev/shm too small for the segment (4 MiB per rank), on every rank: refused when
        // rank 0 reserves it, not a SIGBUS at the first collective that touches a missing page.
        UnusableShm{"TooSmall", "*", "size=1m",
                    "rank 0 cannot create the segment: reserving 8396800 bytes in /dev/shm: No "
                    "space left on device"}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace ddpd::testing
