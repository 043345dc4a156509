// What a process that runs one training job itself (`ddpd-worker run ddp`, `ddpd-train`) adds
// to the job's own flags, and the facts about this host that the daemon advertises. Written
// once here so the two programs cannot drift.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "ddpd/common/job_options.h"

namespace ddpd {

struct LocalRunOptions {
  // After the last step, the CUDA allocator's segments as JSON here (PATH.rankR when the world
  // has more than one rank). Empty: none. Needs --device cuda.
  std::string cuda_memory_snapshot;
  // When the job ends, succeeded or failed, each rank writes its collective journal as JSON to
  // DIR/journal-rankR.json (docs/protocols.md). Empty: none.
  std::string journal_dump_dir;
};

void add_local_run_flags(CLI::App& app, LocalRunOptions& options);

// Throws OptionError naming the flag when `options` cannot apply to `job`.
void validate(const LocalRunOptions& options, const DdpJobOptions& job);

class Communicator;

// Called on every rank when the job has ended: after its last step (`succeeded`), or when it
// failed, with the communicator if rendezvous got that far (else null). Writes what `options`
// asks for: the CUDA snapshot after success only, the journal in both cases. Throws
// std::runtime_error naming the file when it cannot be written.
void finish_local_run(const LocalRunOptions& options, const Communicator* comm, bool succeeded);

// finish_local_run(options, comm, false) for a job that already failed: never throws, returns
// the error to report beside the job's own ("" when all was written).
std::string finish_failed_local_run(const LocalRunOptions& options,
                                    const Communicator* comm) noexcept;

// CUDA devices this process can see; 0 in a CPU build.
int visible_cuda_devices();

// Total memory of CUDA device `device`, bytes; 0 when this process cannot see it (a CPU build,
// no such GPU). Makes no CUDA context, so a worker daemon may ask before it starts any rank.
int64_t cuda_device_memory_bytes(int device);

}  // namespace ddpd
