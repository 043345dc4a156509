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

// `ddpctl local` runs every rank on this host, and each rank keeps two threads busy (its compute
// and its communication). With 2 × world > cores a healthy rank shares its core and may compute
// up to 2 × world / cores times as long as another: the demo (world 2, 2 cores) had one rank
// 1.4-1.5× the other, forward and backward alike, for whole runs (issue 38). Unless the job names
// a threshold, it is lowered to cores / (2 × world), so only a slowdown beyond the sharing is a
// straggler (coordinator/src/straggler_watch.h).
void fit_local_straggler_threshold(DdpJobOptions& options, const CLI::App& flags, int world_size,
                                   unsigned cores);

v1::JobSpec ddp_spec(const DdpJobOptions& options, int world_size);
v1::JobSpec comm_spec(const CommJob& job, int world_size);

}  // namespace ddpd::client
