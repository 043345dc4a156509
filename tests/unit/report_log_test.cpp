// The worker daemon's ReportLog (worker/report_log.h) and its reconnect backoff
// (worker/reconnect_backoff.h): what a session sends, sends again, forgets and drops.
#include <gtest/gtest.h>

#include "ddpd/api/session_protocol.h"
#include "reconnect_backoff.h"
#include "report_log.h"

namespace ddpd {
namespace {

v1::WorkerMessage step(int64_t index) {
  v1::WorkerMessage m;
  m.set_job_id("job-000001");
  m.mutable_step()->set_step(index);
  return m;
}

std::vector<uint64_t> drain(ReportLog& log) {
  std::vector<uint64_t> seqs;
  while (auto m = log.next_to_send(std::chrono::milliseconds(0))) seqs.push_back(m->seq());
  return seqs;
}

TEST(ReportLog, ASessionSendsInOrderAndANewOneSendsAgainWhatWasNotAcknowledged) {
  ReportLog log(1 << 20);
  EXPECT_EQ(log.push(step(0)), 1u);
  EXPECT_EQ(log.push(step(1)), 2u);
  EXPECT_EQ(drain(log), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(log.push(step(2)), 3u);
  EXPECT_EQ(drain(log), (std::vector<uint64_t>{3}));
  log.acknowledge(2);
  EXPECT_EQ(log.kept(), 1u);
  log.rewind();  // the session broke before 3 was acknowledged
  EXPECT_EQ(drain(log), (std::vector<uint64_t>{3}));
  log.acknowledge(3);
  EXPECT_EQ(log.kept(), 0u);
  EXPECT_EQ(log.kept_bytes(), 0);
}

TEST(ReportLog, PastItsBoundStepsAreDroppedAndCountedButAResultIsKept) {
  const int64_t one = static_cast<int64_t>(step(1).ByteSizeLong());
  ReportLog log(2 * one);  // room for two step reports of this size
  EXPECT_EQ(log.push(step(1)), 1u);
  EXPECT_EQ(log.push(step(2)), 2u);
  EXPECT_EQ(log.push(step(3)), 0u);  // dropped
  EXPECT_EQ(log.dropped(), 1);
  v1::WorkerMessage result;
  result.mutable_result()->set_succeeded(true);
  EXPECT_EQ(log.push(result), 3u);
  const auto first = log.next_to_send(std::chrono::milliseconds(0));
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->reports_dropped(), 1);  // the loss travels with what is sent
}

TEST(ReportLog, InterruptEndsTheWaitOfASessionsSender) {
  ReportLog log(1 << 20);
  log.push(step(0));
  log.interrupt();
  EXPECT_FALSE(log.next_to_send(std::chrono::seconds(10)).has_value());
  log.rewind();
  EXPECT_TRUE(log.next_to_send(std::chrono::milliseconds(0)).has_value());
}

TEST(ReconnectBackoff, TheFirstTryComesWithinASecondAndNoneWaitsMoreThanTheCap) {
  // The jitter draws from the upper half of the base.
  EXPECT_DOUBLE_EQ(reconnect_delay_seconds(0, 0.0, 1.0, 10.0), 0.5);
  EXPECT_DOUBLE_EQ(reconnect_delay_seconds(0, 1.0, 1.0, 10.0), 1.0);
  EXPECT_DOUBLE_EQ(reconnect_delay_seconds(2, 1.0, 1.0, 10.0), 4.0);
  EXPECT_DOUBLE_EQ(reconnect_delay_seconds(3, 0.0, 1.0, 10.0), 4.0);
  for (int attempt = 4; attempt < 100; ++attempt) {
    EXPECT_DOUBLE_EQ(reconnect_delay_seconds(attempt, 1.0, 1.0, 10.0), 10.0);
    EXPECT_DOUBLE_EQ(reconnect_delay_seconds(attempt, 0.0, 1.0, 10.0), 5.0);
  }
}

TEST(SessionProtocol, AWorkerTooOldOrTooNewIsRefusedNamingBothVersions) {
  EXPECT_EQ(session_protocol_refusal(kSessionProtocolVersion), "");
  EXPECT_EQ(session_protocol_refusal(0),
            "protocol_version: the worker speaks session protocol 1 (it sends no version), this "
            "coordinator 2..2: upgrade the worker");
  EXPECT_EQ(session_protocol_refusal(3),
            "protocol_version: the worker speaks session protocol 3, this coordinator 2..2: "
            "upgrade the coordinator");
}

}  // namespace
}  // namespace ddpd
