// A finished job as the replay reads it (ddpd/common/step_replay.h): `whatif`, `plan bucket
// --job` and `tune` fetch it from the coordinator, or read it from a file that `ddpctl show
// JOB --json` or `ddpctl local ddp --json` wrote (their "spec" key carries the job's spec).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "ddpd/common/step_replay.h"
#include "ddpd/v1/ddpd.pb.h"

namespace ddpd::client {

// A succeeded DDP job; OptionError naming `flag` otherwise.
MeasuredJob measured_job(const v1::GetJobReply& reply, const std::string& flag);
// The same from job_json() output (render.h), read from `path`.
MeasuredJob measured_job_from_file(const std::string& path, const std::string& flag);
// The all-reduce link of a succeeded comm job; OptionError naming `flag` otherwise.
LinkModel comm_job_link(const v1::GetJobReply& reply, const std::string& flag);

// The same from a comm result file: `ddpd-worker run comm --json` output, or `ddpctl local comm
// --json` output (its first job).
LinkModel comm_link_from_file(const std::string& path, const std::string& flag);

// The spec as JSON (protobuf's mapping), and back: job_json's "spec".
nlohmann::json spec_json(const v1::JobSpec& spec);
v1::JobSpec spec_from_json(const nlohmann::json& json);

}  // namespace ddpd::client
