// The /metrics HTTP endpoint of the daemons: Prometheus' text format from prometheus-cpp
// collectables (registries).
//
// Why not prometheus::Exposer: its embedded civetweb server fails to start ("null context when
// constructing CivetServer") in any process that has loaded Debian's libtorch_cpu, even a
// ten-line program given it by LD_PRELOAD, so the worker could not use it. This endpoint is
// the small part of it the daemons need: GET /metrics, one request at a time.
#pragma once

#include <prometheus/collectable.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace ddpd {

// Thread contract: the constructor starts one serving thread; scrapes call Collect() on the
// collectables from that thread (prometheus-cpp metrics are thread-safe). The destructor stops
// and joins it. Collectables are held weakly: one that is gone is skipped.
class MetricsEndpoint {
 public:
  // Listens on bind_host:port, or the first of port … port + attempts - 1 that is free (several
  // daemons on one host started alike, e.g. `docker-compose --scale worker=N`). Throws
  // std::runtime_error naming --metrics-port when none can be bound.
  MetricsEndpoint(const std::string& bind_host, int port,
                  std::vector<std::weak_ptr<prometheus::Collectable>> collectables,
                  int attempts = 1);
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  int port() const { return port_; }

 private:
  void serve();
  void answer(int client);

  std::vector<std::weak_ptr<prometheus::Collectable>> collectables_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace ddpd
