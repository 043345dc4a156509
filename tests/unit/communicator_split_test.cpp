// split_group's refusals, which need no peer, and a member that never comes, over real
// Gloo ranks in this process. The split itself is exercised by real processes: a heal sends the
// state to the rank that joins over a group of two (tests/multirank/heal_core_test.cpp, Healing, on
// shm and Gloo).
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "comm/communicator_split.h"
#include "ddpd/core/communicator.h"
#include "unit/gloo_ranks.h"

namespace ddpd {
namespace {

std::string logic_error_of(Communicator& comm, const std::vector<int>& members) {
  try {
    split_group(comm, members, "pair");
  } catch (const std::logic_error& e) {
    return e.what();
  }
  return "";
}

TEST(CommunicatorSplit, RefusesARankOutsideItsMembersAndAGroupWithoutAStore) {
  Communicator single(c10::intrusive_ptr<c10d::Backend>(), 0, 1);
  EXPECT_NE(logic_error_of(single, {1}).find("split pair: rank 0 is not among the members"),
            std::string::npos);
  EXPECT_NE(logic_error_of(single, {0, 0}).find("members must be distinct ranks of this group"),
            std::string::npos);
  EXPECT_NE(logic_error_of(single, {0, 1}).find("members must be distinct ranks of this group"),
            std::string::npos)
      << "rank 1 is not in a group of one";
  EXPECT_NE(logic_error_of(single, {0}).find("this group was not formed over a store"),
            std::string::npos);
}

// A member that never calls split_group (a spare that died on its way in): the group does not form,
// and the other member's split_group fails as a collective does, typed, once the timeout has
// passed.
TEST(CommunicatorSplit, AMemberThatNeverComesFailsTheSplitAsATimedOutCollective) {
  const std::chrono::milliseconds timeout{1500};
  testing::GlooRanks ranks(2, timeout);
  try {
    split_group(*ranks.comms[0], {0, 1}, "pair");
    ADD_FAILURE() << "the split formed without rank 1";
  } catch (const CollectiveError& e) {
    EXPECT_EQ(enum_name(e.cause()), "timed_out") << e.what();
    EXPECT_EQ(e.peer_rank(), -1) << e.what();
    EXPECT_NE(
        std::string(e.what()).find("split pair of ranks 0..1, rank 0: the group did not form"),
        std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ddpd
