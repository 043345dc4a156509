// How ddpctl waits out a coordinator that does not answer (a restart, a redeploy): the pauses
// between tries, bounded by --wait, and the id that makes a retried submit safe. No gRPC here,
// so the schedule is tested without a server (tests/unit/ddpctl_retry_test.cpp).
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace ddpd::client {

// Capped exponential backoff with jitter. Pause k (from 0) is min(cap, first × 2^k) less up to
// `jitter` of itself (so the clients of one restarted coordinator do not retry in step), and
// never runs past the wait: the last try starts at the latest when the wait is spent.
struct BackoffPolicy {
  double first_s = 0.4;  // the first retry comes 0.3-0.4 s after the first failure
  double cap_s = 2.0;
  double jitter = 0.25;
};

class Backoff {
 public:
  // `uniform01` draws from [0, 1); by default a generator seeded from std::random_device.
  explicit Backoff(double wait_s, BackoffPolicy policy = {},
                   std::function<double()> uniform01 = {});
  // The pause before the next try, `elapsed_s` after the first try began; nullopt once the wait
  // is spent.
  std::optional<double> next(double elapsed_s);

 private:
  double wait_s_;
  BackoffPolicy policy_;
  std::function<double()> uniform01_;
  int retries_ = 0;
};

// A fresh SubmitJobRequest.request_id: 128 random bits as 32 lower-case hex digits.
std::string random_request_id();

// `seconds` as ddpctl's messages print it: "30", "2.5".
std::string seconds_text(double seconds);

}  // namespace ddpd::client
