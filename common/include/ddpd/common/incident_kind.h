// What the coordinator records about a job as an incident (the API's Incident.kind).
#pragma once

#include "ddpd/common/enum_names.h"

namespace ddpd {

// A stall or a desync it diagnosed, a straggler, an automatic restart, the resumed job's link to
// its new id, or a limit it enforced.
enum class IncidentKind { kStall, kDesync, kStraggler, kRestart, kResumed, kLimit };
DDPD_ENUM_INFO(IncidentKind, "kind");

}  // namespace ddpd
