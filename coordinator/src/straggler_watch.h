// Straggler detection for one job: each rank's compute time per step (its step time minus the
// time it was blocked on communication: without that subtraction the fast ranks, which wait in
// all-reduce for the slow one, would look slow), over a sliding window of steps. A rank's score
// is the fastest rank's median divided by its own; below the threshold it is a straggler,
// reported once per episode. The episode ends when the score recovers halfway from the threshold
// to 1 (0.875 for 0.75), so a score that hovers around the threshold is reported once.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

namespace ddpd::coordinator {

struct StragglerFinding {
  int rank = -1;
  double score = 1;
  std::string message;  // "straggler: rank 1 (score 0.48: compute 2.1× the fastest rank) at
                        // steps 20–29"
};

// Thread contract: none of its own; the coordinator calls it under its mutex.
class StragglerWatch {
 public:
  static constexpr int kDefaultWindow = 10;

  StragglerWatch(int world_size, double threshold, int window = kDefaultWindow);

  // One complete step: every rank's compute seconds, by rank. Returns the ranks whose episode
  // starts with this step (usually none).
  std::vector<StragglerFinding> add_step(int64_t step, const std::vector<double>& compute_seconds);

  // The last scores by rank (1 until a full window has been seen).
  const std::vector<double>& scores() const { return scores_; }

 private:
  double threshold_;
  size_t window_;
  std::vector<std::deque<double>> compute_;  // by rank, the last `window_` steps
  std::vector<double> scores_;
  std::vector<bool> in_episode_;
};

}  // namespace ddpd::coordinator
