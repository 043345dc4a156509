#include "train/memory.h"

#include <sys/resource.h>

#include "ddpd/core/model.h"

namespace ddpd::detail {

int64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

MemoryBytes measure_memory(const std::vector<torch::Tensor>& parameters,
                           int64_t optimizer_state_bytes) {
  MemoryBytes m;
  for (const auto& p : unique_tensors(parameters)) {
    if (p.storage().nbytes() == 0) continue;  // fsdp's full parameters between gathers
    m.param_bytes += p.nbytes();
    if (p.grad().defined()) m.grad_bytes += p.grad().nbytes();
  }
  m.optimizer_state_bytes = optimizer_state_bytes;
  m.peak_bytes = peak_rss_bytes();
  return m;
}

}  // namespace ddpd::detail
