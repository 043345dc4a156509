// comm/peer_failure_watch.h: a rank blocked in a Gloo collective stops waiting once a peer has
// announced its own failure. Three real Gloo ranks over a real TCPStore, one thread each (the
// watch is per communicator, so threads show what processes would).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "comm/failure_exchange.h"
#include "comm/peer_failure_watch.h"
#include "ddpd/core/communicator.h"
#include "unit/gloo_ranks.h"

namespace ddpd {
namespace {

constexpr int kWorld = 3;
// Without the watch, ranks 1 and 2 would wait this long and time out: every bound below is a
// fraction of it, so a wait the watch did not end cannot pass.
constexpr std::chrono::milliseconds kTimeout{20000};

struct WaitOutcome {
  bool threw = false;
  CollectiveFailure cause = CollectiveFailure::kBackend;
  std::string message;
  std::chrono::steady_clock::time_point ended;
};

// This rank's part of a broadcast from rank 0, waited for.
WaitOutcome broadcast_from_rank0(Communicator& comm) {
  WaitOutcome outcome;
  auto tensor = torch::zeros({1000});
  try {
    comm.broadcast(tensor, 0, "check/broadcast").wait();
  } catch (const CollectiveError& e) {
    outcome.threw = true;
    outcome.cause = e.cause();
    outcome.message = e.what();
  }
  outcome.ended = std::chrono::steady_clock::now();
  return outcome;
}

TEST(PeerFailureWatch, AGlooWaitEndsWithThePeersAnnouncedCauseLongBeforeItsTimeout) {
  testing::GlooRanks ranks(kWorld, kTimeout);
  // First a wait that outlasts kWatchAfter with nothing announced: the polls must not end it.
  {
    std::vector<WaitOutcome> healthy(kWorld);
    std::thread late_root([&] {
      std::this_thread::sleep_for(3 * detail::PeerFailureWatch::kWatchAfter);
      healthy[0] = broadcast_from_rank0(*ranks.comms[0]);
    });
    std::thread rank1([&] { healthy[1] = broadcast_from_rank0(*ranks.comms[1]); });
    healthy[2] = broadcast_from_rank0(*ranks.comms[2]);
    late_root.join();
    rank1.join();
    for (int rank = 0; rank < kWorld; ++rank) {
      EXPECT_FALSE(healthy[rank].threw) << "rank " << rank << ": " << healthy[rank].message;
    }
  }
  // Then ranks 1 and 2 wait on rank 0, which never joins and announces a failure instead, its
  // group still open (its pairs close only at the end of the test).
  std::vector<WaitOutcome> waits(kWorld);
  std::thread rank1([&] { waits[1] = broadcast_from_rank0(*ranks.comms[1]); });
  std::thread rank2([&] { waits[2] = broadcast_from_rank0(*ranks.comms[2]); });
  std::this_thread::sleep_for(3 * detail::PeerFailureWatch::kWatchAfter);
  const auto announced = std::chrono::steady_clock::now();
  const auto reports = detail::exchange_failure_reports(
      *ranks.comms[0], CollectiveFailure::kPeerExited, "{}", std::chrono::milliseconds(500));
  rank1.join();
  rank2.join();
  for (int rank : {1, 2}) {
    const double after = std::chrono::duration<double>(waits[rank].ended - announced).count();
    std::printf("[ watch    ] rank %d stopped waiting %.3f s after rank 0's announcement\n", rank,
                after);
    // Both ended once rank 0 had announced, and not by their own timeout.
    EXPECT_GT(after, 0.0) << "rank " << rank << " stopped before the announcement";
    EXPECT_LT(after, kTimeout.count() / 2000.0) << "rank " << rank;
    EXPECT_TRUE(waits[rank].threw) << "rank " << rank;
    EXPECT_EQ(enum_name(waits[rank].cause), "peer_exited") << waits[rank].message;
    EXPECT_NE(waits[rank].message.find("rank 0 announced that its collective of this group "
                                       "failed (peer_exited)"),
              std::string::npos)
        << waits[rank].message;
  }
  ASSERT_EQ(reports.size(), static_cast<size_t>(kWorld));
  EXPECT_EQ(reports[0], std::optional<std::string>("{}"));
}

}  // namespace
}  // namespace ddpd
