#pragma once
// Why collective buffers (buffers every rank of a shared-memory group maps, read in place by
// the all-reduce) fell back to private memory on every rank: the first rank that could not
// create or map its part, as data. The collectives on them stay correct; they copy through the
// transport's staging slots instead, at about 0.5x the busbw (docs/shm-transport.md).

#include <optional>
#include <string>

namespace ddpd {

enum class SharedBufferStep {
  kCreate,  // creating and reserving the rank's own object in /dev/shm
  kMap,     // mapping a peer's object
};

struct SharedBufferFallback {
  int rank = -1;  // the lowest rank that failed
  SharedBufferStep step = SharedBufferStep::kCreate;
  int peer = -1;         // kMap: the rank whose object it could not map
  int error_number = 0;  // errno of the failed call
};

const char* to_string(SharedBufferStep step);
// Throws std::invalid_argument for a name that is not a step's.
SharedBufferStep shared_buffer_step_from_string(const std::string& name);
// For logs: "shared buffers fell back to private memory: rank 1 could not create its buffer in
// /dev/shm (File too large, errno 27)".
std::string describe(const SharedBufferFallback& fallback);

}  // namespace ddpd
