#include <gtest/gtest.h>

#include "ddpd/common/intervals.h"

namespace ddpd {
namespace {

TEST(CoveredSeconds, OverlapsCountOnceAndTheWindowClips) {
  // [1,3] and [2,5] overlap in [2,3]; [7,9] is cut at the window's end 8; [-2,0] is outside.
  EXPECT_DOUBLE_EQ(covered_seconds({{2, 5}, {1, 3}, {7, 9}, {-2, 0}}, {0, 8}), 4.0 + 1.0);
  EXPECT_DOUBLE_EQ(covered_seconds({{1, 4}, {2, 3}}, {0, 10}), 3.0);  // nested
  EXPECT_DOUBLE_EQ(covered_seconds({}, {0, 10}), 0.0);
  EXPECT_DOUBLE_EQ(covered_seconds({{0, 10}}, {2, 3}), 1.0);
}

}  // namespace
}  // namespace ddpd
