#include "prometheus_targets.h"

#include <cstdio>

#include <nlohmann/json.hpp>

namespace ddpd::coordinator {

std::string prometheus_targets_json(const std::vector<ScrapeTarget>& targets) {
  nlohmann::json groups = nlohmann::json::array();
  for (const auto& target : targets) {
    groups.push_back({{"targets", {target.host + ":" + std::to_string(target.metrics_port)}},
                      {"labels", {{"component", "worker"}, {"worker_id", target.worker_id}}}});
  }
  return groups.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

bool write_prometheus_targets(const std::string& path, const std::vector<ScrapeTarget>& targets) {
  const std::string json = prometheus_targets_json(targets);
  const std::string tmp = path + ".tmp";
  FILE* out = std::fopen(tmp.c_str(), "w");
  if (!out) return false;
  const bool written = std::fwrite(json.data(), 1, json.size(), out) == json.size();
  return std::fclose(out) == 0 && written && std::rename(tmp.c_str(), path.c_str()) == 0;
}

}  // namespace ddpd::coordinator
