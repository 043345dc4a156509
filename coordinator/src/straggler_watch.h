// Straggler detection for one job, judged against the job's own measurement noise.
//
// Input: each rank's compute time per step (its step time minus the time it was blocked on
// communication: without that subtraction the fast ranks, which wait in all-reduce for the slow
// one, would look slow).
//
// The rule, and why each part:
// 1. Each step, a rank's excess is ln(its compute / the median of the other ranks' compute). A
//    step where every rank slowed (the host's scheduler, another job) leaves it alone; against the
//    others (not all ranks) it is symmetric at world 2 (rank 0's excess is minus rank 1's), where
//    the lower median of both made the slower rank's ratio at least 1 every step.
// 2. The noise: sigma = 1.4826 × the median absolute deviation of every rank's excess from its own
//    median over the same block of `window` steps, pooled over ranks and the last `noise_steps`
//    steps. Deviations from the rank's own block median, so a slowed rank's shift is not noise.
// 3. A rank is named when, in each of the last `blocks` consecutive blocks of `window` steps, the
//    median of its excess is above z standard errors of a block median (z × 1.2533 × sigma /
//    sqrt(window)) and above ln(1 / threshold): significant against the noise, persistent, and
//    at least the slowdown the job asked to hear about.
//    Why 3 blocks of 10: what passes one block against independent noise is correlated
//    slowness, and the demo's two false events (world 2, 17 ms steps, 2 cores: issue 38) were
//    spells of about 12 steps at 1.3-1.4×. A spell needs more than 2 blocks (5 + 10 + 5 steps)
//    to hold the median of 3; a slowed rank holds it for as long as it is slow.
// 4. Reported once per episode; the episode ends when the last block's median falls below half
//    the bar, so an excess hovering around the bar is one episode.
//
// Delay: a rank slowed from step s is named between steps s + 24 and s + 29 with the defaults.
// Scores (for /metrics and the step lines): 1 / exp(the last block's median excess), capped at 1.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace ddpd::coordinator {

struct StragglerRule {
  int window = 10;       // steps per block
  int blocks = 3;        // consecutive blocks the excess must persist over
  double z = 3;          // the bar, in standard errors of a block's median
  int noise_steps = 60;  // history the noise is estimated over (whole blocks of it)
};

struct StragglerFinding {
  int rank = -1;
  double score = 1;
  // "straggler: rank 1 (score 0.34: compute 2.9× the other ranks' median, 12.0 σ of the step
  // noise ±7%) at steps 10–29"
  std::string message;
};

// Thread contract: none of its own; the coordinator calls it under its mutex.
class StragglerWatch {
 public:
  // threshold: the job's --straggler-threshold (0: never name anyone).
  StragglerWatch(int world_size, double threshold, StragglerRule rule = {});

  // One complete step: every rank's compute seconds, by rank. Returns the ranks whose episode
  // starts with this step (usually none).
  std::vector<StragglerFinding> add_step(int64_t step, const std::vector<double>& compute_seconds);

  // The last scores by rank (1 until a full block has been seen).
  const std::vector<double>& scores() const { return scores_; }
  // The step noise's sigma in ln units (0 until a full block has been seen).
  double noise() const { return sigma_; }

 private:
  double block_median(size_t rank, size_t block) const;  // block 0: the latest
  void estimate_noise();

  double threshold_;
  StragglerRule rule_;
  std::vector<std::deque<double>> excess_;  // by rank, the last noise_steps excesses, oldest first
  std::vector<double> scores_;
  std::vector<bool> in_episode_;
  double sigma_ = 0;
};

}  // namespace ddpd::coordinator
