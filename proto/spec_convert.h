// Conversions between the API's messages and the training core's plain options, shared by the
// coordinator (validation), the worker daemon (running) and ddpctl (building specs from flags).
#pragma once

#include <string>

#include "ddpd/job_options.h"
#include "ddpd/v1/ddpd.pb.h"

namespace ddpd {

v1::DdpSpec to_proto(const DdpJobOptions& options);
// Unset optional fields keep DdpJobOptions' defaults.
DdpJobOptions from_proto(const v1::DdpSpec& spec);

// Validates a submitted spec. Throws OptionError naming the field (a CLI flag name, or
// "world_size" / "kind") and the reason.
void validate_spec(const v1::JobSpec& spec);

std::string to_string(v1::JobState state);
bool is_terminal(v1::JobState state);

}  // namespace ddpd
