// Printing comm-benchmark results (no LibTorch: ddpctl uses it too).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace ddpd {

// An nccl-tests-like table of one comm result JSON (as to_json(CommBenchResult) writes it).
std::string comm_table(const nlohmann::json& result);
// One table over several results (a sweep across world sizes), with a world-size column.
std::string comm_sweep_table(const std::vector<nlohmann::json>& results);

}  // namespace ddpd
