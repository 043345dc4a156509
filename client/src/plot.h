// Charts for `ddpctl show --plot` and `ddpctl local --plot`, drawn by gnuplot (an optional
// run-time dependency: without it the command says which package to install).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace ddpd::client {

// busbw against size, one line per world size and collective. `out` ends in .png or .svg.
void plot_comm(const std::vector<nlohmann::json>& results, const std::string& out);
// Step time and comm fraction per step of a DDP job (job_json's "steps").
void plot_ddp(const nlohmann::json& job, const std::string& out);

}  // namespace ddpd::client
