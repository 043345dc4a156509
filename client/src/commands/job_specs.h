// Specs from flags, for the commands that build jobs (submit, local).
#pragma once

#include <CLI/CLI.hpp>

#include "ddpd/common/comm_options.h"
#include "ddpd/common/job_options.h"
#include "ddpd/v1/ddpd.pb.h"

namespace ddpd::client {

// Without --batch, the default global batch (8) is rounded up to a multiple of the world size
// times --grad-accum, so `--workers 3` runs as it reads instead of failing on 8 % 3; an explicit
// --batch is kept as given. Says so on stderr when it rounds.
void fit_default_batch(DdpJobOptions& options, const CLI::App& flags, int world_size);

v1::JobSpec ddp_spec(const DdpJobOptions& options, int world_size);
v1::JobSpec comm_spec(const CommJob& job, int world_size);

}  // namespace ddpd::client
