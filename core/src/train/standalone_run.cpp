#include "ddpd/core/standalone_run.h"

#include <cstdio>
#include <iostream>

#include "ddpd/common/memory_estimate.h"
#include "ddpd/common/result_json.h"
#include "ddpd/core/communicator.h"
#include "ddpd/core/hf_export.h"
#include "device/device.h"

namespace ddpd {
namespace {

// The admission check's limit, in words: ranks on one host share its memory.
std::string local_memory_share(int local_ranks) {
  return local_ranks > 1 ? "this machine's available memory shared by its " +
                               std::to_string(local_ranks) + " ranks"
                         : "this machine's available memory";
}

// The checks before any rank trains. Throws std::invalid_argument naming the flag or variable.
RendezvousOptions checked_rendezvous(const DdpJobOptions& job, const LocalRunOptions& local) {
  const RendezvousOptions rendezvous = rendezvous_for_job(job);
  validate(local, job);
  if (job.device == Device::kCuda) {
    // A GPU job's parameters, optimizer state and activations live in its GPU's memory.
    check_fits_in_memory(job, rendezvous.world_size,
                         detail::cuda_free_memory_bytes(rendezvous.local_rank),
                         "GPU " + std::to_string(rendezvous.local_rank) + "'s free memory");
  } else {
    check_fits_in_memory(job, rendezvous.world_size,
                         available_memory_bytes() / rendezvous.local_world_size,
                         local_memory_share(rendezvous.local_world_size));
  }
  return rendezvous;
}

TrainingResult train(const DdpJobOptions& job, const RendezvousOptions& rendezvous,
                     const std::shared_ptr<Communicator>& comm, const StandaloneHooks& hooks) {
  if (hooks.connected) hooks.connected(rendezvous, *comm);
  Trainer trainer(job, comm);
  if (hooks.trainer_ready) hooks.trainer_ready(trainer);
  TrainingResult result = trainer.run([&](const StepMetrics& s) {
    if (hooks.step) hooks.step(s);
  });
  // --export-hf keeps the imported model's tokenizer (rank 0 wrote the export).
  if (rendezvous.rank == 0 && !job.export_hf.empty() && !job.init_from.empty()) {
    copy_hf_side_files(job.init_from, job.export_hf);
  }
  return result;
}

}  // namespace

int run_standalone(const DdpJobOptions& job, const LocalRunOptions& local,
                   const StandaloneOutput& output, const StandaloneHooks& hooks) {
  RendezvousOptions rendezvous;
  try {
    rendezvous = checked_rendezvous(job, local);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  const bool prints_result = rendezvous.rank == 0;
  std::shared_ptr<Communicator> comm;
  try {
    try {
      comm = connect(rendezvous);
    } catch (const std::invalid_argument& e) {  // --device cuda in a CPU build, too few GPUs
      std::fprintf(stderr, "error: %s\n", e.what());
      return 2;
    }
    const TrainingResult result = train(job, rendezvous, comm, hooks);
    finish_local_run(local, comm.get(), /*succeeded=*/true);
    if (hooks.succeeded) hooks.succeeded(result);
    if (prints_result && output.json) std::cout << to_json(result).dump() << std::endl;
    if (prints_result && !output.json && output.print_summary) {
      output.print_summary(result, rendezvous.world_size);
    }
    return 0;
  } catch (const std::exception& e) {
    const std::string error = "rank " + std::to_string(rendezvous.rank) + ": " + e.what();
    if (prints_result && output.json) std::cout << failure_json(error).dump() << std::endl;
    std::fprintf(stderr, "FAILED: %s\n", error.c_str());
    const std::string dump_error = finish_failed_local_run(local, comm.get());
    if (!dump_error.empty()) std::fprintf(stderr, "error: %s\n", dump_error.c_str());
    return 1;
  }
}

}  // namespace ddpd
