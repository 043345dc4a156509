#include "ddpd/core/local_run.h"

#include <filesystem>
#include <fstream>

#include "ddpd/core/communicator.h"
#include "device/device.h"

namespace ddpd {

void add_local_run_flags(CLI::App& app, LocalRunOptions& options) {
  app.add_option("--cuda-memory-snapshot", options.cuda_memory_snapshot,
                 "After the last step, write the CUDA allocator's segments as JSON here "
                 "(.rankR appended when WORLD_SIZE > 1; --device cuda)");
  app.add_option("--journal-dump", options.journal_dump_dir,
                 "When the job ends (succeeded or failed), write each rank's collective journal "
                 "to DIR/journal-rankR.json");
}

void validate(const LocalRunOptions& options, const DdpJobOptions& job) {
  if (!options.cuda_memory_snapshot.empty() && job.device != Device::kCuda) {
    throw OptionError("--cuda-memory-snapshot", "needs --device cuda");
  }
}

void finish_local_run(const LocalRunOptions& options, const Communicator* comm, bool succeeded) {
  if (comm == nullptr) return;
  if (succeeded && !options.cuda_memory_snapshot.empty()) {
    detail::write_cuda_memory_snapshot(options.cuda_memory_snapshot, comm->info().rank,
                                       comm->info().world_size);
  }
  if (!options.journal_dump_dir.empty()) {
    std::error_code ignored;
    std::filesystem::create_directories(options.journal_dump_dir, ignored);
    const std::string path =
        options.journal_dump_dir + "/journal-rank" + std::to_string(comm->info().rank) + ".json";
    nlohmann::json dump{{"rank", comm->info().rank},
                        {"world_size", comm->info().world_size},
                        {"succeeded", succeeded},
                        {"journal", journal_json(comm->recorder().journal())}};
    std::ofstream out(path);
    out << dump.dump(1) << "\n";
    if (!out) throw std::runtime_error("--journal-dump: cannot write " + path);
  }
}

std::string finish_failed_local_run(const LocalRunOptions& options,
                                    const Communicator* comm) noexcept {
  try {
    finish_local_run(options, comm, /*succeeded=*/false);
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

int visible_cuda_devices() { return detail::cuda_device_count(); }

int64_t cuda_device_memory_bytes(int device) {
  return device >= 0 && device < visible_cuda_devices() ? detail::cuda_total_memory_bytes(device)
                                                        : 0;
}

}  // namespace ddpd
