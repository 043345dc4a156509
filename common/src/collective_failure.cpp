#include "ddpd/common/collective_failure.h"

#include "enum_names_define.h"

namespace ddpd {

DDPD_ENUM_NAMES(CollectiveFailure, "timed_out", "peer_exited", "peer_silent", "aborted", "desync",
                "backend")

}  // namespace ddpd
