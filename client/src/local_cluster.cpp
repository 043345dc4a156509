#include "local_cluster.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <thread>

#include "ddpd/common/net.h"
#include "ddpd/common/spawn.h"

namespace ddpd::client {

std::string own_directory() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw std::runtime_error("cannot locate ddpctl (/proc/self/exe)");
  return std::filesystem::path(std::string(buf, n)).parent_path();
}

namespace {

std::string random_token() {
  std::random_device rd;
  std::string token;
  const char* hex = "0123456789abcdef";
  for (int i = 0; i < 32; ++i) token += hex[rd() % 16];
  return token;
}

}  // namespace

LocalCluster::LocalCluster(const LocalClusterOptions& options) {
  std::string pattern = (std::filesystem::temp_directory_path() / "ddpctl-local-XXXXXX").string();
  if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
  directory_ = pattern;
  const int port = free_port("127.0.0.1");
  address_ = "127.0.0.1:" + std::to_string(port);
  token_ = random_token();
  const std::string bin = own_directory();
  for (const char* name : {"ddpd-coordinator", "ddpd-worker"}) {
    if (access((bin + "/" + name).c_str(), X_OK) != 0) {
      throw std::runtime_error(std::string("ddpctl local needs ") + name + " beside ddpctl in " +
                               bin);
    }
  }
  auto metrics_port = [&](int index) {
    return std::to_string(options.metrics_port > 0 ? options.metrics_port + index : 0);
  };
  spawn({bin + "/ddpd-coordinator", "--listen", address_, "--db", directory_ + "/ddpd.db",
         "--log-level", options.log_level, "--log-format", options.log_format, "--metrics-port",
         metrics_port(0)},
        "coordinator.log");
  // Waits for the coordinator to listen, so the workers' and ddpctl's first calls do not fail
  // into gRPC's reconnect backoff.
  if (!wait_for_port("127.0.0.1", port, std::chrono::seconds(30))) {
    keep_ = true;
    throw std::runtime_error("the coordinator did not start listening on " + address_ +
                             " within 30 s; log in " + directory_ + "/coordinator.log");
  }
  for (int i = 0; i < options.workers; ++i) {
    spawn(
        {bin + "/ddpd-worker", "--log-level", options.log_level, "--log-format", options.log_format,
         "serve", "--coordinator", address_, "--worker-id", "local-" + std::to_string(i),
         "--advertise-host", "127.0.0.1", "--metrics-port", metrics_port(1 + i)},
        "worker-" + std::to_string(i) + ".log");
  }
}

LocalCluster::~LocalCluster() { stop(); }

pid_t LocalCluster::spawn(const std::vector<std::string>& argv, const std::string& log_name) {
  // The token goes through the environment, not the command line (visible in ps); each daemon
  // dies with ddpctl (spawn.h), so a ddpctl killed outright leaves none behind.
  const pid_t pid = spawn_child(argv, {{"DDPD_TOKEN", token_}}, directory_ + "/" + log_name);
  children_.push_back(pid);
  return pid;
}

void LocalCluster::stop() {
  // Workers first, so none reports a lost coordinator, then the coordinator.
  for (auto it = children_.rbegin(); it != children_.rend(); ++it) kill(*it, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (pid_t pid : children_) {
    while (waitpid(pid, nullptr, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  children_.clear();
  if (!keep_ && !directory_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(directory_, ignored);
    directory_.clear();
  }
}

}  // namespace ddpd::client
