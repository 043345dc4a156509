// The cause of a collective a backend failed, as data (ddpd/core/collective_error.h).
#pragma once

#include <exception>

#include "ddpd/core/collective_error.h"

namespace ddpd::detail {

// A TransportFailure's own cause and peer (shm, and Communicator's waits); Gloo's cause read
// from its words (comm/gloo_backend.h: gloo_failure_cause), with no peer named.
TransportFailure failure_of(const std::exception& error);

}  // namespace ddpd::detail
