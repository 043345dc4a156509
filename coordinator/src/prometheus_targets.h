// Prometheus file-based service discovery (file_sd_configs): the coordinator lists the workers
// with a live session, so Prometheus scrapes the workers that run and no others.
#pragma once

#include <string>
#include <vector>

namespace ddpd::coordinator {

struct ScrapeTarget {
  std::string worker_id;
  std::string host;  // the worker's advertised host
  int metrics_port = 0;
};

// Prometheus' file_sd JSON: one group per target, labelled component="worker" and worker_id.
std::string prometheus_targets_json(const std::vector<ScrapeTarget>& targets);

// Writes prometheus_targets_json(targets) to `path` aside and renames it over the old file, so
// Prometheus never reads half a file. Returns false (and leaves the old file) on an I/O error.
bool write_prometheus_targets(const std::string& path, const std::vector<ScrapeTarget>& targets);

}  // namespace ddpd::coordinator
