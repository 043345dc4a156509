#include "ddpd/core/collective_error.h"

#include <algorithm>

#include <c10/util/Exception.h>

#include "comm/failure_cause.h"
#include "comm/gloo_backend.h"

namespace ddpd {
namespace {

// A closed connection says the peer's rank ended, not how: its process exited, or the rank
// failed or was cancelled under a daemon that lives on.
constexpr const char* kPeerEndedText =
    "a peer rank closed its connection (its rank ended: its process exited, or the rank failed "
    "or was cancelled)";

// The backend's own words on one line.
std::string one_line(std::string words) {
  std::replace(words.begin(), words.end(), '\n', ' ');
  while (!words.empty() && words.back() == ' ') words.pop_back();
  return words;
}

}  // namespace

std::string describe_collective_failure(const std::string& collective, CollectiveFailure cause,
                                        std::chrono::milliseconds timeout,
                                        const std::string& backend_words) {
  const std::string head = "collective " + collective + " ";
  const std::string words = one_line(backend_words);
  switch (cause) {
    case CollectiveFailure::kTimedOut:
      return head + "timed out after " + std::to_string(timeout.count()) +
             " ms: a rank did not join it in time [" + words + "]";
    case CollectiveFailure::kPeerExited:
    case CollectiveFailure::kPeerSilent:
      return head + "failed: " + kPeerEndedText + " [" + words + "]";
    case CollectiveFailure::kAborted:
      return head + "abandoned: the job was cancelled (the daemon aborted the rank) [" + words +
             "]";
    case CollectiveFailure::kDesync:
    case CollectiveFailure::kBackend:
      break;
  }
  return head + "failed: " + words;
}

namespace detail {

std::string words_of(const std::exception& error) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&error)) {
    return c10_error->what_without_backtrace();
  }
  return error.what();
}

TransportFailure failure_of(const std::exception& error) {
  if (const auto* typed = dynamic_cast<const TransportFailure*>(&error)) return *typed;
  const std::string words = words_of(error);
  return {gloo_failure_cause(words), -1, words};
}

}  // namespace detail
}  // namespace ddpd
