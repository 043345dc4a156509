// How `ddpctl whatif` and `ddpctl tune` print figures: the measured job and a prediction side by
// side, and a configuration in one line.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "ddpd/common/step_replay.h"

namespace ddpd::client {

// "bucketed 25 MB, 2 ranks shm, ZeRO-1, 2 micro-batches"
std::string configuration_line(const StepFigures& figures);
// Rows of step, forward, backward, optimizer, comm, exposed, comm fraction, tokens/s and memory:
// measured, predicted and the change; then the link and what the replay does not predict.
std::string whatif_table(const StepFigures& measured, const StepFigures& predicted,
                         const LinkModel& link);
nlohmann::json figures_json(const StepFigures& figures);
nlohmann::json link_json(const LinkModel& link);

}  // namespace ddpd::client
