// The JSON result envelopes (docs/metrics.md#result-json): written by the ranks (`ddpd-worker run
// --json`, the result a job stores) and read back, typed, by everything that shows one (ddpctl's
// show, plot and local, the comm table, the bucket planner). A field is added in the writer, the
// reader and the one place that shows it.
#pragma once

#include <nlohmann/json.hpp>

#include "ddpd/common/comm_options.h"
#include "ddpd/common/training_result.h"

namespace ddpd {

nlohmann::json to_json(const TrainingResult& result);
nlohmann::json to_json(const CommBenchResult& result);
nlohmann::json failure_json(const std::string& error);

// The readers. A key the writer always writes and the JSON lacks throws std::runtime_error
// naming it ("result JSON: steps[3].loss: missing"); keys that older results lack (derived
// figures, notes, memory by size) take the struct's defaults. Steps carry no spans (the JSON
// has none). Extra keys (job_id, history: `ddpctl show --json` adds them) are ignored.
TrainingResult training_result_from_json(const nlohmann::json& json);
CommBenchResult comm_result_from_json(const nlohmann::json& json);

}  // namespace ddpd
