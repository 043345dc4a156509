// c10d's Gloo backend, created in one place (gloo_backend.cpp says why it is kept apart).
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>

#include "ddpd/core/collective_error.h"

namespace ddpd {

// A Gloo backend of `world_size` ranks over `store`, with `timeout` on every collective. Its
// device binds `bind_address` (a hostname or address), or this host's name when empty.
// Two threads: one for the buckets that backward overlaps, one for the rest.
c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int world_size,
                                                    std::chrono::milliseconds timeout,
                                                    const std::string& bind_address);

// The cause of a failed Gloo collective, from its message: Gloo's errors carry only words
// (ProcessGroupGloo rethrows gloo's IoException, whose type the wheel's headers do not declare),
// so they are read here, at that boundary, and nowhere else. Gloo words a timeout in c10d's
// Work::wait ("Operation timed out!") and its own transport ("Timed out waiting 5000ms for
// recv"), and a peer's end as a closed or reset TCP pair (errno's words: "Connection closed by
// peer", "Connection reset by peer", "Broken pipe", "Connection refused", end of file).
CollectiveFailure gloo_failure_cause(const std::string& message);

}  // namespace ddpd
