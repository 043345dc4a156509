#include "straggler_watch.h"

#include <algorithm>
#include <cstdio>

namespace ddpd::coordinator {
namespace {

double median(std::deque<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// The lower median: the middle value, or the smaller of the two middle ones.
double lower_median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[(values.size() - 1) / 2];
}

}  // namespace

StragglerWatch::StragglerWatch(int world_size, double threshold, int window)
    : threshold_(threshold),
      window_(static_cast<size_t>(std::max(window, 1))),
      ratios_(world_size),
      scores_(world_size, 1.0),
      steps_below_(world_size, 0),
      in_episode_(world_size, false) {}

std::vector<StragglerFinding> StragglerWatch::add_step(int64_t step,
                                                       const std::vector<double>& compute_seconds) {
  std::vector<StragglerFinding> started;
  const size_t ranks = std::min(ratios_.size(), compute_seconds.size());
  if (ranks == 0) return started;
  std::vector<double> compute(ranks);
  for (size_t r = 0; r < ranks; ++r) compute[r] = std::max(compute_seconds[r], 0.0);
  const double reference = lower_median(compute);
  for (size_t r = 0; r < ranks; ++r) {
    ratios_[r].push_back(reference > 0 ? compute[r] / reference : 1.0);
    if (ratios_[r].size() > window_) ratios_[r].pop_front();
  }
  if (ratios_.front().size() < window_) return started;
  const double recovered = threshold_ + (1.0 - threshold_) / 2;
  for (size_t r = 0; r < ranks; ++r) {
    const double slowdown = median(ratios_[r]);
    scores_[r] = slowdown > 0 ? std::min(1.0, 1.0 / slowdown) : 1.0;
    const bool below = threshold_ > 0 && scores_[r] < threshold_;
    steps_below_[r] = below ? steps_below_[r] + 1 : 0;
    if (steps_below_[r] >= kPersistence && !in_episode_[r]) {
      in_episode_[r] = true;
      char text[200];
      std::snprintf(text, sizeof(text),
                    "straggler: rank %zu (score %.2f: compute %.1f× the median rank's) at steps "
                    "%lld–%lld",
                    r, scores_[r], slowdown,
                    static_cast<long long>(step - static_cast<int64_t>(window_) + 1),
                    static_cast<long long>(step));
      started.push_back({static_cast<int>(r), scores_[r], text});
    } else if (in_episode_[r] && scores_[r] >= recovered) {
      in_episode_[r] = false;
    }
  }
  return started;
}

}  // namespace ddpd::coordinator
