// The cause of a collective a backend failed, as data (ddpd/core/collective_error.h).
#pragma once

#include <exception>
#include <string>

#include "ddpd/core/collective_error.h"

namespace ddpd::detail {

// An error's words: c10's without the backtrace its what() appends ("Exception raised from …").
std::string words_of(const std::exception& error);

// A TransportFailure's own cause and peer (shm, and Communicator's waits); Gloo's cause read
// from its words (comm/gloo_backend.h: gloo_failure_cause), with no peer named.
TransportFailure failure_of(const std::exception& error);

}  // namespace ddpd::detail
