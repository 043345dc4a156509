// What /metrics reports of the coordinator's state, taken under its lock at scrape time.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace ddpd::coordinator {

struct StateCounts {
  std::map<std::string, int> workers;  // by state name: IDLE, BUSY, LOST, DISCONNECTED
  std::map<std::string, int> jobs;     // by state name: PENDING, …, CANCELLED
  int queue_length = 0;                // jobs waiting for workers
  // Straggler scores by (job_id, rank): running jobs and the last ended ones
  // (kRetainedScoreJobs), so the last scores stay scrapeable and the label set stays bounded.
  std::map<std::pair<std::string, int>, double> compute_scores;
  // Healing since the coordinator started: heals begun, and the seconds from each loss seen to
  // the healed group's first complete step, in order (metrics observe the ones new to them).
  int64_t heals_started = 0;
  std::vector<double> heal_seconds;
};

constexpr int kRetainedScoreJobs = 4;

}  // namespace ddpd::coordinator
