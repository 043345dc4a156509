#include "ddpd/common/incident_kind.h"

#include "enum_names_define.h"

namespace ddpd {

DDPD_ENUM_NAMES(IncidentKind, "stall", "desync", "straggler", "restart", "resumed", "limit", "heal",
                "healed", "adopted")

}  // namespace ddpd
