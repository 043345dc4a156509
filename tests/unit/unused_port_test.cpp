// The tests' unused_port() keeps out of the range the worker daemons reserve for their rendezvous
// stores (ddpd/common/net.h): a test's server bound there could fail a concurrent test's job.
#include <gtest/gtest.h>

#include "ddpd/common/net.h"
#include "support/process.h"

namespace ddpd::testing {
namespace {

TEST(UnusedPort, NeverInTheWorkersRendezvousRangeAndBindable) {
  // 200 draws: at the default ephemeral range, 12000 of the 16384 candidate ports are the
  // workers', so a draw that ignored the range would land there with probability 0.73 each.
  for (int i = 0; i < 200; ++i) {
    const int port = unused_port();
    EXPECT_FALSE(port >= kRendezvousPortFirst && port < kRendezvousPortFirst + kRendezvousPortCount)
        << port;
    EXPECT_TRUE(can_bind("127.0.0.1", port)) << port;
  }
}

}  // namespace
}  // namespace ddpd::testing
