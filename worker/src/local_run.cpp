#include "ddpd/local_run.h"

#include "device.h"

namespace ddpd {

void add_local_run_flags(CLI::App& app, LocalRunOptions& options) {
  app.add_option("--cuda-memory-snapshot", options.cuda_memory_snapshot,
                 "After the last step, write the CUDA allocator's segments as JSON here "
                 "(.rankR appended when WORLD_SIZE > 1; --device cuda)");
}

void validate(const LocalRunOptions& options, const DdpJobOptions& job) {
  if (!options.cuda_memory_snapshot.empty() && job.device != "cuda") {
    throw OptionError("--cuda-memory-snapshot", "needs --device cuda");
  }
}

void finish_local_run(const LocalRunOptions& options, int rank, int world_size) {
  if (options.cuda_memory_snapshot.empty()) return;
  detail::write_cuda_memory_snapshot(options.cuda_memory_snapshot, rank, world_size);
}

int visible_cuda_devices() { return detail::cuda_device_count(); }

}  // namespace ddpd
