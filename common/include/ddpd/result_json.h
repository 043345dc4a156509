// The JSON result envelope shared by `ddpd-worker run --json` and (later) `ddpctl show --json`.
#pragma once

#include <nlohmann/json.hpp>

#include "ddpd/comm_options.h"
#include "ddpd/training_result.h"

namespace ddpd {

nlohmann::json to_json(const TrainingResult& result);
nlohmann::json to_json(const CommBenchResult& result);
nlohmann::json failure_json(const std::string& error);

}  // namespace ddpd
