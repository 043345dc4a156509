#include "train/memory.h"

#include <sys/resource.h>

#include <fstream>
#include <string>

#include "ddpd/core/model.h"

namespace ddpd::detail {

int64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

namespace {

// A "Vm...:" line of /proc/self/status in bytes, or -1.
int64_t status_bytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    int64_t kib = 0;
    if (key == field + ":" && status >> kib) return kib * 1024;
    status.ignore(1 << 16, '\n');
  }
  return -1;
}

}  // namespace

ResidentPeakWindow::ResidentPeakWindow() {
  std::ofstream clear_refs("/proc/self/clear_refs");
  clear_refs << "5";
  clear_refs.flush();
  if (clear_refs) start_rss_bytes_ = status_bytes("VmRSS");
}

int64_t ResidentPeakWindow::peak_rise_bytes() const {
  const int64_t peak = status_bytes("VmHWM");
  return start_rss_bytes_ < 0 || peak < 0 ? -1 : std::max<int64_t>(0, peak - start_rss_bytes_);
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
