// What /metrics reports of the coordinator's state, taken under its lock at scrape time.
#pragma once

#include <map>
#include <string>
#include <utility>

namespace ddpd::coordinator {

struct StateCounts {
  std::map<std::string, int> workers;  // by state name: IDLE, BUSY, LOST
  std::map<std::string, int> jobs;     // by state name: PENDING, …, CANCELLED
  int queue_length = 0;                // jobs waiting for workers
  // Straggler scores by (job_id, rank): running jobs and the last ended ones
  // (kRetainedScoreJobs), so the last scores stay scrapeable and the label set stays bounded.
  std::map<std::pair<std::string, int>, double> compute_scores;
};

constexpr int kRetainedScoreJobs = 4;

}  // namespace ddpd::coordinator
