// A failed collective's cause as data: Gloo's words read at its boundary (comm/gloo_backend.h),
// and the message built from the cause, for the causes the fault tests cannot provoke on demand
// (multirank/failure_test.cpp provokes exits and hangs over shm and Gloo).
#include <gtest/gtest.h>

#include "comm/failure_cause.h"
#include "comm/gloo_backend.h"
#include "ddpd/core/collective_error.h"

namespace ddpd {
namespace {

using std::chrono::milliseconds;

TEST(GlooFailureCause, TimeoutsAndClosedConnectionsInGloosWords) {
  EXPECT_EQ(gloo_failure_cause("Operation timed out!"), CollectiveFailure::kTimedOut);
  EXPECT_EQ(gloo_failure_cause("[../gloo/transport/tcp/pair.cc:534] Timed out waiting 5000ms "
                               "for recv operation to complete"),
            CollectiveFailure::kTimedOut);
  for (const char* closed :
       {"[../gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:1234",
        "Read error [127.0.0.1]:40446: Connection reset by peer", "Write error: Broken pipe",
        "connect: Connection refused", "Read error: end of file"}) {
    EXPECT_EQ(gloo_failure_cause(closed), CollectiveFailure::kPeerExited) << closed;
  }
  EXPECT_EQ(gloo_failure_cause("invalid tensor"), CollectiveFailure::kBackend);
}

// A TransportFailure (shm's, or the communicator's own waits) keeps its cause and peer whatever
// its words; anything else is read as Gloo's.
TEST(FailureOf, TypedFailuresKeepTheirCauseAndPeer) {
  const TransportFailure typed(CollectiveFailure::kPeerSilent, 2, "timed out, connection reset");
  const TransportFailure kept = detail::failure_of(typed);
  EXPECT_EQ(kept.cause(), CollectiveFailure::kPeerSilent);
  EXPECT_EQ(kept.peer_rank(), 2);
  const TransportFailure read = detail::failure_of(std::runtime_error("Broken pipe"));
  EXPECT_EQ(read.cause(), CollectiveFailure::kPeerExited);
  EXPECT_EQ(read.peer_rank(), -1);
}

TEST(CollectiveFailureMessage, SaysTheCauseAndKeepsTheBackendsWords) {
  EXPECT_EQ(describe_collective_failure("all_reduce/bucket0", CollectiveFailure::kTimedOut,
                                        milliseconds(5000), "Operation timed out!"),
            "collective all_reduce/bucket0 timed out after 5000 ms: a rank did not join it in "
            "time [Operation timed out!]");
  EXPECT_EQ(describe_collective_failure("x", CollectiveFailure::kPeerExited, milliseconds(1),
                                        "shm: rank 1 (pid 7) is gone (its process exited)\n"
                                        "Exception raised from wait at Work.cpp:1"),
            "collective x failed: a peer rank closed its connection (its rank ended: its process "
            "exited, or the rank failed or was cancelled) [shm: rank 1 (pid 7) is gone (its "
            "process exited)]");
  EXPECT_EQ(describe_collective_failure("x", CollectiveFailure::kAborted, milliseconds(1),
                                        "the communicator was aborted"),
            "collective x abandoned: the job was cancelled (the daemon aborted the rank) [the "
            "communicator was aborted]");
  EXPECT_EQ(describe_collective_failure("x", CollectiveFailure::kBackend, milliseconds(1),
                                        "invalid tensor"),
            "collective x failed: invalid tensor");
}

TEST(CollectiveFailureNames, AreTheApisWords) {
  EXPECT_EQ(enum_name(CollectiveFailure::kTimedOut), "timed_out");
  EXPECT_EQ(enum_name(CollectiveFailure::kPeerSilent), "peer_silent");
  EXPECT_EQ(enum_name(CollectiveFailure::kBackend), "backend");
}

}  // namespace
}  // namespace ddpd
