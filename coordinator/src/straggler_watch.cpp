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

}  // namespace

StragglerWatch::StragglerWatch(int world_size, double threshold, int window)
    : threshold_(threshold),
      window_(static_cast<size_t>(std::max(window, 1))),
      compute_(world_size),
      scores_(world_size, 1.0),
      in_episode_(world_size, false) {}

std::vector<StragglerFinding> StragglerWatch::add_step(int64_t step,
                                                       const std::vector<double>& compute_seconds) {
  std::vector<StragglerFinding> started;
  for (size_t r = 0; r < compute_.size() && r < compute_seconds.size(); ++r) {
    compute_[r].push_back(std::max(compute_seconds[r], 0.0));
    if (compute_[r].size() > window_) compute_[r].pop_front();
  }
  if (compute_.empty() || compute_.front().size() < window_) return started;
  std::vector<double> medians;
  for (const auto& c : compute_) medians.push_back(median(c));
  const double fastest = *std::min_element(medians.begin(), medians.end());
  for (size_t r = 0; r < medians.size(); ++r) {
    scores_[r] = medians[r] > 0 ? std::min(1.0, fastest / medians[r]) : 1.0;
    const bool straggling = threshold_ > 0 && scores_[r] < threshold_;
    if (straggling && !in_episode_[r]) {
      char text[200];
      std::snprintf(text, sizeof(text),
                    "straggler: rank %zu (score %.2f: compute %.1f× the fastest rank) at steps "
                    "%lld–%lld",
                    r, scores_[r], medians[r] / fastest,
                    static_cast<long long>(step - static_cast<int64_t>(window_) + 1),
                    static_cast<long long>(step));
      started.push_back({static_cast<int>(r), scores_[r], text});
    }
    // An episode ends only once the score is well clear of the threshold (halfway to 1), so a
    // score hovering around it is one episode, not one per crossing.
    const double recovered = threshold_ + (1.0 - threshold_) / 2;
    if (straggling) {
      in_episode_[r] = true;
    } else if (scores_[r] >= recovered) {
      in_episode_[r] = false;
    }
  }
  return started;
}

}  // namespace ddpd::coordinator
