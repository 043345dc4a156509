// ddpctl riding through a coordinator restart, the parts that need no coordinator: the backoff
// schedule (client/src/rpc_retry.h), watch's de-duplication of a replay (watch_dedup.h), and a
// ControlClient with nothing listening behind its address. A real restart is
// tests/e2e/client_retry_test.cpp's.
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "control_client.h"
#include "rpc_retry.h"
#include "support/process.h"
#include "watch_dedup.h"

namespace ddpd::client {
namespace {

// The pauses a Backoff gives until `wait_s` is spent, each try taking `try_s`.
std::vector<double> schedule(double wait_s, std::function<double()> uniform01, double try_s = 0) {
  Backoff backoff(wait_s, BackoffPolicy{}, std::move(uniform01));
  std::vector<double> pauses;
  double elapsed = try_s;
  while (auto pause = backoff.next(elapsed)) {
    pauses.push_back(*pause);
    elapsed += *pause + try_s;
  }
  return pauses;
}

double sum(const std::vector<double>& values) {
  double total = 0;
  for (double v : values) total += v;
  return total;
}

TEST(Backoff, DoublesFromFourTenthsUpToTheCapWithoutJitter) {
  const auto pauses = schedule(30, [] { return 0.0; });
  ASSERT_GE(pauses.size(), 5u);
  EXPECT_DOUBLE_EQ(pauses[0], 0.4);
  EXPECT_DOUBLE_EQ(pauses[1], 0.8);
  EXPECT_DOUBLE_EQ(pauses[2], 1.6);
  EXPECT_DOUBLE_EQ(pauses[3], 2.0);
  EXPECT_DOUBLE_EQ(pauses[4], 2.0);
  // 0.4 + 0.8 + 1.6, thirteen pauses of 2 s (28.8 s), and the last cut to the 1.2 s left.
  ASSERT_EQ(pauses.size(), 17u);
  // 1e-9: float64 roundoff of a sum of 17 terms up to 30 is below 17 * 30 * 2^-52, about 1e-13.
  EXPECT_NEAR(pauses.back(), 1.2, 1e-9);
  EXPECT_NEAR(sum(pauses), 30.0, 1e-9);
}

TEST(Backoff, JitterTakesUpToAQuarterOffEachPause) {
  const auto shortest = schedule(30, [] { return 1.0; });  // the bound of [0, 1)
  EXPECT_DOUBLE_EQ(shortest[0], 0.3);
  EXPECT_DOUBLE_EQ(shortest[1], 0.6);
  EXPECT_DOUBLE_EQ(shortest[3], 1.5);
  for (int run = 0; run < 200; ++run) {
    const auto pauses = schedule(30, {});  // the real generator
    ASSERT_GE(pauses.size(), 4u);
    EXPECT_GE(pauses[0], 0.3);
    EXPECT_LE(pauses[0], 0.4);
    EXPECT_GE(pauses[1], 0.6);
    EXPECT_LE(pauses[1], 0.8);
    for (size_t k = 3; k + 1 < pauses.size(); ++k) {
      EXPECT_GE(pauses[k], 1.5);
      EXPECT_LE(pauses[k], 2.0);
    }
  }
}

TEST(Backoff, TriesNeverRunPastTheWait) {
  for (double wait : {0.1, 1.0, 2.5, 30.0}) {
    for (double try_s : {0.0, 0.05, 0.7}) {
      const auto pauses = schedule(wait, {}, try_s);
      // The pauses and the tries between them (the last one starts by the wait).
      const double last_try_starts = sum(pauses) + try_s * pauses.size();
      EXPECT_LE(last_try_starts, wait + 1e-9) << wait << " " << try_s;
      for (double p : pauses) {
        EXPECT_GT(p, 0);
        EXPECT_LE(p, 2.0);
      }
    }
  }
  EXPECT_NEAR(sum(schedule(2.5, [] { return 0.0; })), 2.5, 1e-9);  // 0.4 0.8 1.3
}

TEST(Backoff, ZeroWaitNeverRetries) {
  Backoff backoff(0);
  EXPECT_FALSE(backoff.next(0).has_value());
  EXPECT_TRUE(schedule(0, {}).empty());
}

TEST(RequestId, Is128RandomBitsInHex) {
  std::set<std::string> ids;
  for (int i = 0; i < 100; ++i) {
    const std::string id = random_request_id();
    ASSERT_EQ(id.size(), 32u) << id;
    EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 100u);
}

v1::JobEvent transition(v1::JobState state, double t, const std::string& reason) {
  v1::JobEvent e;
  e.mutable_transition()->set_state(state);
  e.mutable_transition()->set_unix_time(t);
  e.mutable_transition()->set_reason(reason);
  return e;
}

v1::JobEvent incident(const std::string& kind, double t, const std::string& message) {
  v1::JobEvent e;
  e.mutable_incident()->set_kind(kind);
  e.mutable_incident()->set_unix_time(t);
  e.mutable_incident()->set_rank(-1);
  e.mutable_incident()->set_message(message);
  return e;
}

v1::JobEvent step(int64_t n, double loss) {
  v1::JobEvent e;
  e.mutable_step()->set_step(n);
  e.mutable_step()->set_loss(loss);
  e.set_total_steps(10);
  return e;
}

// The keys of the events `dedup` lets through from a new stream of `events`.
std::vector<std::string> passed(WatchDedup& dedup, const std::vector<v1::JobEvent>& events) {
  dedup.new_stream();
  std::vector<std::string> keys;
  for (const auto& e : events) {
    if (dedup.admit(e)) keys.push_back(event_key(e));
  }
  return keys;
}

std::vector<std::string> keys_of(const std::vector<v1::JobEvent>& events) {
  std::vector<std::string> keys;
  for (const auto& e : events) keys.push_back(event_key(e));
  return keys;
}

TEST(WatchDedup, TheFirstStreamPassesEverythingInOrder) {
  // A job restarted from its step-1 checkpoint reports steps 1 and 2 again: both times shown.
  const std::vector<v1::JobEvent> events = {transition(v1::PENDING, 100.0, "submitted"),
                                            transition(v1::RUNNING, 101.0, "placed"),
                                            step(0, 5.0),
                                            step(1, 4.0),
                                            step(2, 3.5),
                                            incident("restart", 102.5, "rank 1 exited"),
                                            step(1, 4.1),
                                            step(2, 3.6)};
  WatchDedup dedup;
  EXPECT_EQ(passed(dedup, events), keys_of(events));
}

TEST(WatchDedup, AReplayInAnotherOrderPassesOnlyTheNewEvents) {
  WatchDedup dedup;
  passed(dedup, {transition(v1::PENDING, 100.0, "submitted"),
                 transition(v1::RUNNING, 101.0, "placed"), step(0, 5.0), step(1, 4.0),
                 incident("straggler", 101.5, "rank 1 is slow"), step(2, 3.5)});
  // After a restart: stored transitions and incidents first, then the steps (their figures
  // aggregated again), with what happened while ddpctl was away.
  const auto replay = passed(
      dedup, {transition(v1::PENDING, 100.0, "submitted"), transition(v1::RUNNING, 101.0, "placed"),
              incident("straggler", 101.5, "rank 1 is slow"),
              incident("adopted", 103.0, "the ranks kept training"),
              transition(v1::SUCCEEDED, 104.0, "all ranks succeeded"), step(0, 5.01), step(1, 4.01),
              step(2, 3.51), step(3, 3.2), step(4, 3.0)});
  EXPECT_EQ(replay, keys_of({incident("adopted", 103.0, "the ranks kept training"),
                             transition(v1::SUCCEEDED, 104.0, "all ranks succeeded"), step(3, 3.2),
                             step(4, 3.0)}));
  // A third stream of the same events passes nothing.
  EXPECT_TRUE(passed(dedup, {transition(v1::SUCCEEDED, 104.0, "all ranks succeeded"), step(4, 3.0),
                             step(0, 5.0)})
                  .empty());
}

TEST(WatchDedup, StepsRunAgainAfterARestartPassOnceEach) {
  WatchDedup dedup;
  passed(dedup, {step(0, 5.0), step(1, 4.0), step(2, 3.5)});
  // The replay holds steps 0-2 and, after a restart from step 1's checkpoint, 1-3 again: the
  // second step 1 and 2 are new, and so is 3.
  const auto replay =
      passed(dedup, {incident("restart", 103.0, "from step 1"), step(0, 5.0), step(1, 4.0),
                     step(2, 3.5), step(1, 4.2), step(2, 3.7), step(3, 3.3)});
  EXPECT_EQ(replay, keys_of({incident("restart", 103.0, "from step 1"), step(1, 4.2), step(2, 3.7),
                             step(3, 3.3)}));
  EXPECT_TRUE(
      passed(dedup, {step(1, 0), step(1, 0), step(2, 0), step(3, 0), step(0, 0), step(2, 0)})
          .empty());
}

v1::JobEvent pending(double t, const std::string& reason) {
  v1::JobEvent e;
  e.mutable_pending()->set_unix_time(t);
  e.mutable_pending()->set_reason(reason);
  return e;
}

// A pending job's reasons pass once each; a restarted coordinator works out the current one again,
// at another time, which passes only when it is not the one shown last.
TEST(WatchDedup, PendingReasonsPassWhenTheyChange) {
  WatchDedup dedup;
  const auto first =
      passed(dedup, {transition(v1::PENDING, 100.0, "submitted"), pending(100.0, "waiting: 2 idle"),
                     pending(101.0, "waiting: 0 idle"), pending(102.0, "waiting: 2 idle")});
  EXPECT_EQ(first.size(), 4u);
  EXPECT_TRUE(
      passed(dedup, {transition(v1::PENDING, 100.0, "submitted"), pending(100.0, "waiting: 2 idle"),
                     pending(101.0, "waiting: 0 idle"), pending(102.0, "waiting: 2 idle")})
          .empty());
  // After a coordinator restart: the same reason at a new time is not news; another one is.
  EXPECT_TRUE(passed(dedup, {transition(v1::PENDING, 100.0, "submitted"),
                             pending(110.0, "waiting: 2 idle")})
                  .empty());
  EXPECT_EQ(passed(dedup, {pending(111.0, "waiting: 1 idle")}),
            keys_of({pending(111.0, "waiting: 1 idle")}));
}

TEST(WatchDedup, KeysTellTransitionsApartByStateTimeAndReason) {
  EXPECT_NE(event_key(transition(v1::RUNNING, 1.0, "placed")),
            event_key(transition(v1::PENDING, 1.0, "placed")));
  EXPECT_NE(event_key(transition(v1::RUNNING, 1.0, "placed")),
            event_key(transition(v1::RUNNING, 1.5, "placed")));
  EXPECT_NE(event_key(transition(v1::RUNNING, 1.0, "placed")),
            event_key(transition(v1::RUNNING, 1.0, "restarted")));
  EXPECT_NE(event_key(incident("stall", 1.0, "x")), event_key(incident("desync", 1.0, "x")));
  EXPECT_EQ(event_key(step(7, 1.0)), event_key(step(7, 2.0)));
}

// A ControlClient whose coordinator address has nothing listening.
struct NoCoordinator {
  explicit NoCoordinator(double wait_s) {
    options.coordinator = "127.0.0.1:" + std::to_string(testing::unused_port());
    options.wait_seconds = wait_s;
  }
  ConnectionOptions options;
};

double seconds_of(const std::function<void()>& run) {
  const auto start = std::chrono::steady_clock::now();
  run();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(ControlClientRetry, AReadRetriesForTheWaitSaysSoOnceThenFails) {
  NoCoordinator none(1.5);
  ControlClient control(none.options);
  std::string error;
  ::testing::internal::CaptureStderr();
  const double took = seconds_of([&] {
    try {
      control.list();
    } catch (const RpcError& e) {
      error = e.what();
    }
  });
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(error.rfind("UNAVAILABLE: ", 0), 0u) << error;
  EXPECT_GE(took, 1.5);
  EXPECT_LT(took, 5.0);
  EXPECT_EQ(count(err, "retrying"), 1) << err;
  EXPECT_EQ(
      err.rfind("ddpctl: coordinator " + none.options.coordinator + " unavailable (UNAVAILABLE: ",
                0),
      0u)
      << err;
  EXPECT_NE(err.find("); retrying for up to 1.5 s (--wait)\n"), std::string::npos) << err;
}

TEST(ControlClientRetry, ZeroWaitFailsAtOnceAndSilently) {
  NoCoordinator none(0);
  ControlClient control(none.options);
  ::testing::internal::CaptureStderr();
  const double took = seconds_of([&] { EXPECT_THROW(control.workers(), RpcError); });
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_LT(took, 1.0);
}

TEST(ControlClientRetry, CancelIsTriedOnce) {
  NoCoordinator none(10);
  ControlClient control(none.options);
  ::testing::internal::CaptureStderr();
  const double took = seconds_of([&] { EXPECT_THROW(control.cancel("job-000001"), RpcError); });
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_LT(took, 1.0);
}

TEST(ControlClientRetry, WatchAndSubmitRetryForTheWaitToo) {
  NoCoordinator none(1);
  ControlClient control(none.options);
  ::testing::internal::CaptureStderr();
  const double watched = seconds_of([&] {
    EXPECT_THROW(control.watch("job-000001", [](const v1::JobEvent&) { FAIL(); }), RpcError);
  });
  const double submitted =
      seconds_of([&] { EXPECT_THROW(control.submit(v1::JobSpec()), RpcError); });
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_GE(watched, 1.0);
  EXPECT_GE(submitted, 1.0);
  EXPECT_LT(watched + submitted, 8.0);
  // No call in between succeeded: one outage, one line.
  EXPECT_EQ(count(err, "retrying for up to 1 s (--wait)"), 1) << err;
}

}  // namespace
}  // namespace ddpd::client
