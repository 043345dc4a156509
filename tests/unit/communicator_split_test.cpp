// Communicator::split's refusals, which need no peer. The split itself is exercised by real
// processes: a heal sends the state to the rank that joins over a group of two
// (tests/multirank/heal_test.cpp, Healing, on shm and Gloo).
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "ddpd/core/communicator.h"

namespace ddpd {
namespace {

std::string logic_error_of(Communicator& comm, const std::vector<int>& members) {
  try {
    comm.split(members, "pair");
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

}  // namespace
}  // namespace ddpd
