// A failed collective's cause as data: Gloo's words read at its boundary (comm/gloo_backend.h),
// and the message built from the cause, for the causes the fault tests cannot provoke on demand
// (multirank/failure_test.cpp provokes exits and hangs over shm and Gloo).
#include <gtest/gtest.h>

#include <c10/util/Exception.h>

#include "comm/failure_cause.h"
#include "comm/gloo_backend.h"
#include "ddpd/core/collective_error.h"

namespace ddpd {
namespace {

using std::chrono::milliseconds;

// Gloo's own messages, as LibTorch 2.11's ProcessGroupGloo raises them (the first from this
// project's fault tests; the others as Gloo's tcp transport words them, seen in users' reports).
TEST(GlooFailureCause, TimeoutsAndClosedConnectionsInGloosWords) {
  for (const char* timed_out :
       {"[/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting "
        "1800000ms for recv operation to complete",
        "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:520] Application timeout caused "
        "pair closure",
        "Operation timed out!"}) {
    EXPECT_EQ(gloo_failure_cause(timed_out), CollectiveFailure::kTimedOut) << timed_out;
  }
  for (const char* closed :
       {"[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:538] Read error "
        "[127.0.0.1]:61146: Connection reset by peer",
        "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer "
        "[192.168.200.105]:6575",
        "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:589] Write error "
        "[127.0.0.1]:40446: Broken pipe",
        "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:144] connect [127.0.0.1]:29500: "
        "Connection refused"}) {
    EXPECT_EQ(gloo_failure_cause(closed), CollectiveFailure::kPeerExited) << closed;
  }
  EXPECT_EQ(gloo_failure_cause("[enforce fail at gloo/transport/tcp/pair.cc:248] op.nbytes <= "
                               "nbytes. 32 vs 16"),
            CollectiveFailure::kBackend);
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
  // c10's errors lose the backtrace their what() appends.
  const c10::Error timed_out(c10::SourceLocation{"wait", "Work.cpp", 1}, "Operation timed out!");
  const TransportFailure c10_read = detail::failure_of(timed_out);
  EXPECT_EQ(c10_read.cause(), CollectiveFailure::kTimedOut);
  EXPECT_STREQ(c10_read.what(), "Operation timed out!");
}

TEST(CollectiveFailureMessage, SaysTheCauseAndKeepsTheBackendsWords) {
  EXPECT_EQ(describe_collective_failure("all_reduce/bucket0", CollectiveFailure::kTimedOut,
                                        milliseconds(5000), "Operation timed out!"),
            "collective all_reduce/bucket0 timed out after 5000 ms: a rank did not join it in "
            "time [Operation timed out!]");
  EXPECT_EQ(describe_collective_failure("x", CollectiveFailure::kPeerExited, milliseconds(1),
                                        "shm: rank 1 (pid 7) is gone (its process exited)\n"),
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
