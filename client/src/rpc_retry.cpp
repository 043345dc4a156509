#include "rpc_retry.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

namespace ddpd::client {

Backoff::Backoff(double wait_s, BackoffPolicy policy, std::function<double()> uniform01)
    : wait_s_(wait_s), policy_(policy), uniform01_(std::move(uniform01)) {
  if (!uniform01_) {
    uniform01_ = [engine = std::mt19937_64(std::random_device()())]() mutable {
      return std::uniform_real_distribution<double>(0.0, 1.0)(engine);
    };
  }
}

std::optional<double> Backoff::next(double elapsed_s) {
  const double remaining = wait_s_ - elapsed_s;
  if (remaining <= 0) return std::nullopt;
  // The exponent stops growing once the cap is reached, so it never overflows.
  const double base = std::min(policy_.cap_s, std::ldexp(policy_.first_s, std::min(retries_, 30)));
  ++retries_;
  const double pause = base * (1.0 - policy_.jitter * uniform01_());
  return std::min(pause, remaining);
}

std::string random_request_id() {
  std::random_device device;
  std::string id;
  for (int i = 0; i < 4; ++i) {
    char word[9];
    std::snprintf(word, sizeof word, "%08x", static_cast<unsigned>(device()));
    id += word;
  }
  return id;
}

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", seconds);
  return text;
}

}  // namespace ddpd::client
