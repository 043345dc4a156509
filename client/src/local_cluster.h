// `ddpctl local`: a coordinator and N workers on loopback, in a temporary directory.
#pragma once

#include <string>
#include <vector>

#include <sys/types.h>

namespace ddpd::client {

// Starts the daemons from the directory holding ddpctl (build/bin), with a fresh token and
// database; stop() (or the destructor) terminates them and removes the directory unless
// keep_directory() was called (their logs stay there for a failed job).
//
// Thread contract: single-threaded; owned by ddpctl's main thread.
struct LocalClusterOptions {
  int workers = 2;
  std::string log_level = "warn";   // the daemons' --log-level
  std::string log_format = "text";  // the daemons' --log-format
  // 0: no /metrics. Else the coordinator serves it on this port and worker i on port + 1 + i
  // (the targets deploy/prometheus/prometheus.yml scrapes for 9400).
  int metrics_port = 0;
};

// The directory of ddpctl's own binary, where ddpd-coordinator and ddpd-worker are installed
// beside it.
std::string own_directory();

class LocalCluster {
 public:
  explicit LocalCluster(const LocalClusterOptions& options);
  ~LocalCluster();
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;

  const std::string& address() const { return address_; }
  const std::string& token() const { return token_; }
  const std::string& directory() const { return directory_; }
  void keep_directory() { keep_ = true; }
  void stop();

 private:
  pid_t spawn(const std::vector<std::string>& argv, const std::string& log_name);

  std::string directory_;
  std::string address_;
  std::string token_;
  std::vector<pid_t> children_;
  bool keep_ = false;
};

}  // namespace ddpd::client
