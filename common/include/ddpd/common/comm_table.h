// Printing comm-benchmark results (no LibTorch: ddpctl uses it too).
#pragma once

#include <string>
#include <vector>

#include "ddpd/common/comm_options.h"

namespace ddpd {

// An nccl-tests-like table of one result: the ceilings, a row per size with its share of each
// ceiling, and the α–β fits.
std::string comm_table(const CommBenchResult& result);
// One table over several results (a sweep across world sizes), with a world-size column.
std::string comm_sweep_table(const std::vector<CommBenchResult>& results);

}  // namespace ddpd
