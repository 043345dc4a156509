// Charts for `ddpctl show --plot` and `ddpctl local --plot`, drawn by gnuplot (an optional
// run-time dependency: without it the command says which package to install).
#pragma once

#include <string>
#include <vector>

#include "ddpd/common/comm_options.h"
#include "ddpd/common/training_result.h"

namespace ddpd::client {

// busbw against size, one line per world size and collective. `out` ends in .png or .svg.
void plot_comm(const std::vector<CommBenchResult>& results, const std::string& out);
// Step time and comm fraction per step of a DDP job (rank 0's result), titled with its id.
void plot_ddp(const TrainingResult& result, const std::string& job_id, const std::string& out);

}  // namespace ddpd::client
