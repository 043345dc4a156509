// Conversions between the API's messages and the training core's plain options, shared by the
// coordinator (validation), the worker daemon (running) and ddpctl (building specs from flags).
#pragma once

#include <string>

#include "ddpd/common/comm_options.h"
#include "ddpd/common/job_options.h"
#include "ddpd/common/stall_analysis.h"
#include "ddpd/v1/ddpd.pb.h"

namespace ddpd {

v1::DdpSpec to_proto(const DdpJobOptions& options);
// Unset optional fields keep DdpJobOptions' defaults.
DdpJobOptions from_proto(const v1::DdpSpec& spec);

v1::CommSpec to_proto(const CommJob& job);
CommJob from_proto(const v1::CommSpec& spec);

// A rank's position as a heartbeat carries it, and back.
v1::RankProgress to_proto(const RankPosition& position);
RankPosition from_proto(const v1::RankProgress& progress);

// The job kind's name: "ddp", "comm" or "unknown".
std::string kind_name(const v1::JobSpec& spec);

// How validate_spec's OptionError names the wrong field: by the ddpctl flag that sets it
// ("--batch"), for ddpctl, which checks specs built from flags before submitting; or by the
// field's name in the API's messages ("batch_size"), for the coordinator's INVALID_ARGUMENT
// replies to callers that never saw a flag.
enum class FieldNames { kFlag, kProto };

// Validates a submitted spec and returns its DDP options, decoded once for its holder to keep
// (defaults for a comm job). Throws OptionError naming the field (see FieldNames; "kind" when
// the spec names no job kind) and the reason.
DdpJobOptions validate_spec(const v1::JobSpec& spec, FieldNames names = FieldNames::kFlag);

// A spec's DDP options (defaults for a comm job): how a stored, once validated spec is decoded.
DdpJobOptions ddp_options_of(const v1::JobSpec& spec);

// The JobSpec / DdpSpec / CommSpec field a ddpctl flag sets: "--batch" -> "batch_size",
// "--world-size" -> "world_size", "--timeout" -> "collective_timeout_s".
std::string proto_field(const std::string& flag);

// `error` as API callers should read it: the same reason, naming proto_field(flag).
OptionError naming_proto_field(const OptionError& error);

bool is_terminal(v1::JobState state);

// A failed rank's error as the job's history states it, from its cause: a desync reads
// "collective desync (--check-collectives): <the finding>", any other cause its error as sent.
std::string failure_text(const v1::JobResult& result);

}  // namespace ddpd
