// What the coordinator records about a job as an incident (the API's Incident.kind).
#pragma once

#include "ddpd/common/enum_names.h"

namespace ddpd {

// A stall or a desync it diagnosed, a straggler, an automatic restart, the resumed job's link to
// its new id, a limit it enforced, a lost rank replaced in place (heal) and the first step
// the healed group completed (healed), or a running job's ranks claimed again after a
// coordinator restart or a worker's lost session (adopted).
enum class IncidentKind {
  kStall,
  kDesync,
  kStraggler,
  kRestart,
  kResumed,
  kLimit,
  kHeal,
  kHealed,
  kAdopted
};
DDPD_ENUM_INFO(IncidentKind, "kind");

}  // namespace ddpd
