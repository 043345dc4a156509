// Straggler detection for one job, robust on an oversubscribed host.
//
// Input: each rank's compute time per step (its step time minus the time it was blocked on
// communication: without that subtraction the fast ranks, which wait in all-reduce for the slow
// one, would look slow).
//
// The rule, and why each part:
// 1. Each step, a rank's compute is divided by the step's reference: the lower median over ranks
//    (the middle rank at world 3, the second fastest at 4, the faster one at 2). A step where
//    every rank slowed (another job, the host's scheduler) leaves the ratios alone, and one rank
//    descheduled for a step cannot drag the reference with it. Scoring against the fastest rank
//    named healthy ranks 5-6 times per 60-step run at world 3 on 2 cores, at scores 0.63-0.75.
// 2. A rank's score is 1 / the median of its ratios over the last `window` steps, capped at 1:
//    a few outlier steps (a context switch) do not move a median.
// 3. An episode starts when the score has stayed below the threshold for kPersistence complete
//    steps in a row, and is reported once; it ends when the score recovers halfway from the
//    threshold to 1 (0.875 for 0.75), so a score hovering around the threshold is one episode.
//
// Delay: a rank slowed from step s crosses the median at step s + window/2 and is reported
// kPersistence - 1 steps later: s + 7 with the defaults (window 10, persistence 3).
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
  std::string message;  // "straggler: rank 1 (score 0.48: compute 2.1× the median rank's) at
                        // steps 20–29"
};

// Thread contract: none of its own; the coordinator calls it under its mutex.
class StragglerWatch {
 public:
  static constexpr int kDefaultWindow = 10;
  static constexpr int kPersistence = 3;  // complete steps below the threshold before a report

  StragglerWatch(int world_size, double threshold, int window = kDefaultWindow);

  // One complete step: every rank's compute seconds, by rank. Returns the ranks whose episode
  // starts with this step (usually none).
  std::vector<StragglerFinding> add_step(int64_t step, const std::vector<double>& compute_seconds);

  // The last scores by rank (1 until a full window has been seen).
  const std::vector<double>& scores() const { return scores_; }

 private:
  double threshold_;
  size_t window_;
  std::vector<std::deque<double>> ratios_;  // by rank, compute / the step's reference
  std::vector<double> scores_;
  std::vector<int> steps_below_;  // by rank, consecutive steps with the score below threshold_
  std::vector<bool> in_episode_;
};

}  // namespace ddpd::coordinator
