// The JSON result envelope shared by `ddpd-worker run --json` and (later) `ddpctl show --json`.
#pragma once

#include <nlohmann/json.hpp>

#include "ddpd/comm_options.h"
#include "ddpd/trainer.h"

namespace ddpd {

nlohmann::json to_json(const TrainingResult& result);
nlohmann::json to_json(const CommBenchResult& result);
nlohmann::json failure_json(const std::string& error);
// An nccl-tests-like table of a comm result JSON (as to_json wrote it).
std::string comm_table(const nlohmann::json& result);

}  // namespace ddpd
