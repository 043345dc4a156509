// The collective journal as a unit: sequence numbers in launch order, the ring keeping the last
// `capacity` entries, completion out of order, failures, and the progress a heartbeat reports.
#include <gtest/gtest.h>

#include <stdexcept>

#include "ddpd/core/collective_journal.h"

namespace ddpd {
namespace {

TEST(CollectiveJournal, NumbersLaunchesAndTracksProgress) {
  CollectiveJournal journal(8);
  EXPECT_EQ(journal.progress().last_enqueued, 0);
  EXPECT_FALSE(journal.progress().oldest_pending.has_value());
  EXPECT_EQ(journal.enqueue("all_reduce", "bucket0", 100, "float", 1.0), 1);
  EXPECT_EQ(journal.enqueue("all_reduce", "bucket1", 50, "float", 1.5), 2);
  EXPECT_EQ(journal.enqueue("broadcast", "owner1", 7, "float", 2.0), 3);
  journal.complete(2, 2.5);  // out of order: #1 is still pending
  auto progress = journal.progress();
  EXPECT_EQ(progress.last_enqueued, 3);
  EXPECT_EQ(progress.last_completed, 2);
  ASSERT_TRUE(progress.oldest_pending.has_value());
  EXPECT_EQ(progress.oldest_pending->seq, 1);
  EXPECT_EQ(progress.oldest_pending->tag, "bucket0");
  EXPECT_DOUBLE_EQ(progress.oldest_pending->enqueued_s, 1.0);

  journal.complete(1, 3.0);
  journal.fail(3, 3.5);
  progress = journal.progress();
  EXPECT_EQ(progress.last_completed, 2);  // a failure is not a completion
  EXPECT_FALSE(progress.oldest_pending.has_value());
  const auto entries = journal.entries();
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].state, CollectiveState::kCompleted);
  EXPECT_DOUBLE_EQ(entries[0].ended_s, 3.0);
  EXPECT_EQ(entries[2].state, CollectiveState::kFailed);
  EXPECT_EQ(entries[2].op, "broadcast");
  EXPECT_EQ(entries[2].numel, 7);
  // An end reported twice, or for an entry that never was, changes nothing.
  journal.complete(3, 9.0);
  journal.complete(42, 9.0);
  EXPECT_EQ(journal.entries()[2].state, CollectiveState::kFailed);
}

TEST(CollectiveJournal, RingKeepsTheLastCapacityEntries) {
  CollectiveJournal journal(4);
  for (int i = 0; i < 10; ++i) {
    const int64_t seq = journal.enqueue("all_reduce", "b" + std::to_string(i), i, "float", i);
    if (i != 7) journal.complete(seq, i + 0.5);
  }
  const auto entries = journal.entries();
  ASSERT_EQ(entries.size(), 4u);
  EXPECT_EQ(entries.front().seq, 7);
  EXPECT_EQ(entries.back().seq, 10);
  EXPECT_EQ(entries.back().tag, "b9");
  const auto progress = journal.progress();
  EXPECT_EQ(progress.last_enqueued, 10);
  EXPECT_EQ(progress.last_completed, 10);
  ASSERT_TRUE(progress.oldest_pending.has_value());
  EXPECT_EQ(progress.oldest_pending->seq, 8);  // the 8th launch (i = 7) never completed
  // Ends of entries that have left the ring are ignored.
  journal.complete(2, 99);
  EXPECT_EQ(journal.entries().front().seq, 7);
}

TEST(CollectiveJournal, JsonAndBadCapacity) {
  CollectiveJournal journal(2);
  journal.enqueue("all_gather", "param3", 12, "float", 0.25);
  const auto json = journal_json(journal);
  EXPECT_EQ(json["capacity"], 2);
  EXPECT_EQ(json["last_enqueued"], 1);
  EXPECT_EQ(json["entries"][0]["op"], "all_gather");
  EXPECT_EQ(json["entries"][0]["state"], "enqueued");
  EXPECT_THROW(CollectiveJournal(0), std::invalid_argument);
}

}  // namespace
}  // namespace ddpd
