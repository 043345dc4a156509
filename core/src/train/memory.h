// Byte accounting for the three measurement points (after init, before and after the last step).
#pragma once

#include <torch/torch.h>

#include <vector>

#include "ddpd/core/trainer.h"

namespace ddpd::detail {

// Sums the bytes of distinct tensors (views of one buffer count once per view).
MemoryBytes measure_memory(const std::vector<torch::Tensor>& parameters,
                           int64_t optimizer_state_bytes);

// Peak resident set size of this process, bytes (since the last ResidentPeakWindow began).
int64_t peak_rss_bytes();

// How far this process's resident memory rose above where it stood when the window began, at its
// highest since then: VmHWM minus the starting VmRSS, after the kernel's high-water mark is reset
// to the current RSS (writing 5 to /proc/self/clear_refs, Linux 4.0 and later). That reset is
// process-wide, so peak_rss_bytes() counts from here on. -1 where /proc refuses the reset.
class ResidentPeakWindow {
 public:
  ResidentPeakWindow();
  int64_t peak_rise_bytes() const;

 private:
  int64_t start_rss_bytes_ = -1;
};

}  // namespace ddpd::detail
