#include "straggler_watch.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "ddpd/common/median.h"

namespace ddpd::coordinator {
namespace {

// sigma of a normal distribution = this × its median absolute deviation.
constexpr double kMadToSigma = 1.4826;
// The standard error of the median of n normal samples = this × sigma / sqrt(n) (sqrt(pi / 2)).
constexpr double kMedianStandardError = 1.2533;
// A compute time at or below zero (step minus exposed comm, rounded) counts as 1 µs, so that
// its logarithm is finite; real steps take milliseconds.
constexpr double kShortestCompute = 1e-6;

// ln(compute[r] / the median of the other ranks' compute), for every rank.
std::vector<double> excesses(const std::vector<double>& compute) {
  std::vector<double> out(compute.size(), 0.0);
  if (compute.size() < 2) return out;
  std::vector<double> others;
  for (size_t r = 0; r < compute.size(); ++r) {
    others.clear();
    for (size_t o = 0; o < compute.size(); ++o) {
      if (o != r) others.push_back(compute[o]);
    }
    out[r] = std::log(compute[r] / median(others));
  }
  return out;
}

}  // namespace

StragglerWatch::StragglerWatch(int world_size, double threshold, StragglerRule rule)
    : threshold_(threshold),
      rule_(rule),
      excess_(std::max(world_size, 0)),
      scores_(std::max(world_size, 0), 1.0),
      in_episode_(std::max(world_size, 0), false) {
  rule_.window = std::max(rule_.window, 1);
  rule_.blocks = std::max(rule_.blocks, 1);
  rule_.noise_steps = std::max(rule_.noise_steps, rule_.window * rule_.blocks);
}

double StragglerWatch::block_median(size_t rank, size_t block) const {
  const auto& x = excess_[rank];
  const size_t w = rule_.window, end = x.size() - block * w;
  return median(std::vector<double>(x.begin() + (end - w), x.begin() + end));
}

void StragglerWatch::estimate_noise() {
  std::vector<double> deviations;
  const size_t w = rule_.window;
  for (size_t r = 0; r < excess_.size(); ++r) {
    const auto& x = excess_[r];
    for (size_t block = 0; (block + 1) * w <= x.size(); ++block) {
      const double centre = block_median(r, block);
      const size_t end = x.size() - block * w;
      for (size_t i = end - w; i < end; ++i) deviations.push_back(std::abs(x[i] - centre));
    }
  }
  sigma_ = deviations.empty() ? 0 : kMadToSigma * median(deviations);
}

std::vector<StragglerFinding> StragglerWatch::add_step(int64_t step,
                                                       const std::vector<double>& compute_seconds) {
  std::vector<StragglerFinding> started;
  const size_t ranks = excess_.size();
  if (ranks < 2 || compute_seconds.size() < ranks) return started;
  std::vector<double> compute(ranks);
  for (size_t r = 0; r < ranks; ++r) compute[r] = std::max(compute_seconds[r], kShortestCompute);
  const auto x = excesses(compute);
  const size_t keep = static_cast<size_t>(rule_.noise_steps);
  for (size_t r = 0; r < ranks; ++r) {
    excess_[r].push_back(x[r]);
    if (excess_[r].size() > keep) excess_[r].pop_front();
  }
  const size_t w = rule_.window, blocks = rule_.blocks;
  if (excess_.front().size() < w) return started;
  estimate_noise();
  std::vector<double> latest(ranks);
  for (size_t r = 0; r < ranks; ++r) {
    latest[r] = block_median(r, 0);
    scores_[r] = std::min(1.0, std::exp(-latest[r]));
  }
  if (threshold_ <= 0 || excess_.front().size() < blocks * w) return started;
  const double standard_error = kMedianStandardError * sigma_ / std::sqrt(static_cast<double>(w));
  const double bar = std::max(rule_.z * standard_error, std::log(1 / threshold_));
  for (size_t r = 0; r < ranks; ++r) {
    bool persistent = latest[r] > bar;
    for (size_t b = 1; persistent && b < blocks; ++b) persistent = block_median(r, b) > bar;
    if (persistent && !in_episode_[r]) {
      in_episode_[r] = true;
      char text[200];
      std::snprintf(text, sizeof(text),
                    "straggler: rank %zu (score %.2f: compute %.1f× the other ranks' median; "
                    "step noise ±%.0f%%) at steps %lld–%lld",
                    r, scores_[r], std::exp(latest[r]), 100 * std::expm1(sigma_),
                    static_cast<long long>(step - static_cast<int64_t>(blocks * w) + 1),
                    static_cast<long long>(step));
      started.push_back({static_cast<int>(r), scores_[r], text});
    } else if (in_episode_[r] && latest[r] < bar / 2) {
      in_episode_[r] = false;
    }
  }
  return started;
}

}  // namespace ddpd::coordinator
