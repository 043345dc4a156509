// The worker session's protocol version (docs/protocols.md, "Worker session"): what a worker's
// hello says it speaks, and what a coordinator accepts. Bump kSessionProtocolVersion when a
// session message changes meaning; raise kOldestSessionProtocolVersion when a coordinator can no
// longer serve the older workers.
#pragma once

#include <string>

namespace ddpd {

// 1: hello, heartbeats, steps, results (rounds 1-4). 2: rank claims, sequence numbers and
// acknowledgements; a session's end no longer stops the rank.
inline constexpr int kSessionProtocolVersion = 2;
inline constexpr int kOldestSessionProtocolVersion = 2;

// Empty when a coordinator of this build serves a worker speaking `worker_version`, else why
// not, naming both versions (hello.protocol_version; 0: a worker from before versions).
inline std::string session_protocol_refusal(int worker_version) {
  if (worker_version >= kOldestSessionProtocolVersion &&
      worker_version <= kSessionProtocolVersion) {
    return "";
  }
  const std::string worker =
      worker_version == 0 ? "1 (it sends no version)" : std::to_string(worker_version);
  const std::string range = std::to_string(kOldestSessionProtocolVersion) + ".." +
                            std::to_string(kSessionProtocolVersion);
  return "protocol_version: the worker speaks session protocol " + worker + ", this coordinator " +
         range + ": " +
         (worker_version < kOldestSessionProtocolVersion ? "upgrade the worker"
                                                         : "upgrade the coordinator");
}

}  // namespace ddpd
