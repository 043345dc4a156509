// Between the replay's two files: the link's samples and fit (step_replay_link.cpp), which the
// replay (step_replay.cpp) calibrates.
#pragma once

#include <vector>

#include "ddpd/common/step_replay.h"

namespace ddpd {

// One all-reduce's service, split: seconds the rank computed meanwhile, and seconds it waited.
struct LinkSample {
  double bytes = 0;
  double computing_s = 0;
  double waiting_s = 0;
};

// The job's all-reduces after warm-up, each split by the rank's compute (the last backward and
// the per-bucket AdamW).
std::vector<LinkSample> link_samples(const MeasuredJob& job);

}  // namespace ddpd
