// Why a collective failed, as data (the core's CollectiveError carries it; the worker reports it
// as JobResult.collective_cause).
#pragma once

#include "ddpd/common/enum_names.h"

namespace ddpd {

enum class CollectiveFailure {
  kTimedOut,    // a rank did not join within the collective timeout
  kPeerExited,  // a peer's rank ended: its connection closed, it left the group, its process died
  kPeerSilent,  // a peer stopped its heartbeat (stopped, hung in the kernel): shm only
  kAborted,     // this rank's communicator was aborted (the job was cancelled)
  kDesync,      // --check-collectives: the ranks launched different collectives
  kBackend,     // the backend's own error, none of the above
};
DDPD_ENUM_INFO(CollectiveFailure, "collective_cause");

// A peer's rank ended or went silent: the survivors learn it within moments of each other.
inline bool peer_ended(CollectiveFailure cause) {
  return cause == CollectiveFailure::kPeerExited || cause == CollectiveFailure::kPeerSilent;
}

}  // namespace ddpd
