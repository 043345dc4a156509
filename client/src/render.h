// How ddpctl prints jobs, steps and workers.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "ddpd/v1/ddpd.pb.h"

namespace ddpd::client {

// The `ddpd-worker run --json` envelope (rank 0's result) plus job_id, state, the state
// history, the error if any, and every rank's step reports under "rank_steps".
nlohmann::json job_json(const v1::GetJobReply& reply);
// One row per rank and step.
std::string steps_csv(const v1::GetJobReply& reply);
// Summary table for `show` and `local`.
std::string job_summary(const v1::GetJobReply& reply);
// One live line per watch event, with a progress bar for steps.
std::string event_line(const v1::JobEvent& event);
std::string jobs_table(const v1::ListJobsReply& jobs);
// `ddpctl diagnose`: one row per rank (state, phase, step, last enqueued and completed sequence
// numbers, the oldest pending collective and its age, the compute score). A running job's ages
// are brought up to `now_unix`; an ended job's are as last recorded.
std::string diagnosis_table(const v1::Job& job, double now_unix);
// The same as JSON: {"job_id", "state", "live", "ranks": [{"rank", "worker_id", "state", "phase",
// "step", "last_enqueued", "last_completed", "oldest_pending": {…} | null, "compute_score"}]}.
nlohmann::json diagnosis_json(const v1::Job& job, double now_unix);
std::string workers_table(const v1::ListWorkersReply& workers);

}  // namespace ddpd::client
