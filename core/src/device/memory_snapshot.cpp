// The opt-in CUDA memory snapshot of `run ddp` / ddpd-train (--cuda-memory-snapshot).
#include <fstream>
#include <stdexcept>

#include "device/device.h"

namespace ddpd::detail {

void write_cuda_memory_snapshot(const std::string& path, int rank, int world_size) {
  const std::string file = world_size > 1 ? path + ".rank" + std::to_string(rank) : path;
  nlohmann::json snapshot = cuda_memory_snapshot();
  snapshot["rank"] = rank;
  std::ofstream out(file);
  out << snapshot.dump() << "\n";
  if (!out) throw std::runtime_error("--cuda-memory-snapshot: cannot write " + file);
}

}  // namespace ddpd::detail
