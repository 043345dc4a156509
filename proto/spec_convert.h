// Conversions between the API's messages and the training core's plain options, shared by the
// coordinator (validation), the worker daemon (running) and ddpctl (building specs from flags).
#pragma once

#include <string>

#include "ddpd/comm_options.h"
#include "ddpd/job_options.h"
#include "ddpd/v1/ddpd.pb.h"

namespace ddpd {

v1::DdpSpec to_proto(const DdpJobOptions& options);
// Unset optional fields keep DdpJobOptions' defaults.
DdpJobOptions from_proto(const v1::DdpSpec& spec);

// A comm job: the benchmark options plus the backend and collective timeout.
struct CommJob {
  CommBenchOptions bench;
  std::string backend = "gloo";
  double collective_timeout_s = 300;
};
v1::CommSpec to_proto(const CommJob& job);
CommJob from_proto(const v1::CommSpec& spec);

// The job kind's name: "ddp", "comm" or "unknown".
std::string kind_name(const v1::JobSpec& spec);

// Validates a submitted spec. Throws OptionError naming the field (a CLI flag name, or
// "world_size" / "kind") and the reason.
void validate_spec(const v1::JobSpec& spec);

std::string to_string(v1::JobState state);
bool is_terminal(v1::JobState state);

}  // namespace ddpd
