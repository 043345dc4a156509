// What a process that runs one training job itself (`ddpd-worker run ddp`, `ddpd-train`) adds
// to the job's own flags, and the facts about this host that the daemon advertises. Written
// once here so the two programs cannot drift.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "ddpd/job_options.h"

namespace ddpd {

struct LocalRunOptions {
  // After the last step, the CUDA allocator's segments as JSON here (PATH.rankR when the world
  // has more than one rank). Empty: none. Needs --device cuda.
  std::string cuda_memory_snapshot;
};

void add_local_run_flags(CLI::App& app, LocalRunOptions& options);

// Throws OptionError naming the flag when `options` cannot apply to `job`.
void validate(const LocalRunOptions& options, const DdpJobOptions& job);

// Called after the job's last step on every rank: writes what `options` asks for. Throws
// std::runtime_error naming the file when it cannot be written.
void finish_local_run(const LocalRunOptions& options, int rank, int world_size);

// CUDA devices this process can see; 0 in a CPU build.
int visible_cuda_devices();

}  // namespace ddpd
