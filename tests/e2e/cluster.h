// A coordinator and N workers as real processes on loopback, driven with ddpctl: the fixture of
// the end-to-end suites.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/files.h"
#include "support/process.h"

namespace ddpd::testing {

inline const std::string kToken = "test-token-123";

inline std::string bin(const std::string& name) { return binary_dir() + "/" + name; }

// The job id `ddpctl submit` prints on its first line.
inline std::string job_id_of(const std::string& submit_output) {
  return submit_output.substr(0, submit_output.find('\n'));
}

// A coordinator and N workers; the coordinator can be restarted on the same port and database.
class Cluster {
 public:
  // coordinator_args / worker_args(i) are appended to the daemons' command lines. The
  // coordinator's /metrics is off unless coordinator_args name --metrics-port (tests run in
  // parallel and would all take its default port).
  explicit Cluster(int workers, const std::string& name,
                   std::vector<std::string> coordinator_args = {},
                   std::function<std::vector<std::string>(int)> worker_args = {})
      : name_(name),
        coordinator_args_(std::move(coordinator_args)),
        worker_args_(std::move(worker_args)) {
    if (std::find(coordinator_args_.begin(), coordinator_args_.end(), "--metrics-port") ==
        coordinator_args_.end()) {
      coordinator_args_.insert(coordinator_args_.end(), {"--metrics-port", "0"});
    }
    port_ = unused_port();
    db_ = temp_dir() + "/" + name + ".db";
    start_coordinator();
    for (int i = 0; i < workers; ++i) start_worker(i);
    // Ready when the coordinator answers and every worker has registered.
    EXPECT_TRUE(wait_until(
        [&] { return ctl({"workers"}).exit_code == 0 && count_workers("IDLE") == workers; },
        std::chrono::seconds(60)))
        << coordinator_->log();
  }

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  const std::string& db() const { return db_; }
  int coordinator_pid() const { return coordinator_->pid(); }

  void start_coordinator() {
    std::vector<std::string> argv{bin("ddpd-coordinator"), "--listen", address(), "--db", db_};
    // 3 s unless the test gives its own --worker-timeout.
    if (std::find(coordinator_args_.begin(), coordinator_args_.end(), "--worker-timeout") ==
        coordinator_args_.end()) {
      argv.insert(argv.end(), {"--worker-timeout", "3"});
    }
    argv.insert(argv.end(), coordinator_args_.begin(), coordinator_args_.end());
    coordinator_ = std::make_unique<BackgroundProcess>(
        argv, std::map<std::string, std::string>{{"DDPD_TOKEN", kToken}},
        name_ + "-coordinator" + std::to_string(restarts_++));
  }

  // A crash: SIGKILL, nothing flushed, no goodbye to the workers.
  void kill_coordinator() {
    coordinator_->signal(SIGKILL);
    coordinator_->wait(std::chrono::seconds(20));
  }
  // The next start_coordinator() opens this database instead (a coordinator that lost its store).
  void use_db(const std::string& path) { db_ = path; }
  // Worker i's next start reaches the coordinator at 127.0.0.1:port (a proxy) instead.
  void route_worker(int i, int port) { worker_ports_[i] = port; }

  void stop_coordinator() {
    coordinator_->signal(SIGTERM);
    EXPECT_EQ(coordinator_->wait(std::chrono::seconds(20)), 0) << coordinator_->log();
  }

  void start_worker(int i) {
    workers_.resize(std::max<size_t>(workers_.size(), i + 1));
    const auto route = worker_ports_.find(i);
    const std::string coordinator =
        route == worker_ports_.end() ? address() : "127.0.0.1:" + std::to_string(route->second);
    std::vector<std::string> argv{bin("ddpd-worker"), "serve",
                                  "--coordinator",    coordinator,
                                  "--worker-id",      name_ + "-w" + std::to_string(i),
                                  "--heartbeat",      "0.5"};
    if (worker_args_) {
      const auto extra = worker_args_(i);
      argv.insert(argv.end(), extra.begin(), extra.end());
    }
    workers_[i] = std::make_unique<BackgroundProcess>(
        argv, std::map<std::string, std::string>{{"DDPD_TOKEN", kToken}},
        name_ + "-worker" + std::to_string(i));
  }

  BackgroundProcess& worker(int i) { return *workers_[i]; }

  ProcessOutcome ctl(std::vector<std::string> args, const std::string& token = kToken) {
    std::vector<std::string> argv{bin("ddpctl"), "--coordinator", address()};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_process(argv, {{"DDPD_TOKEN", token}}, std::chrono::seconds(120));
  }

  nlohmann::json show(const std::string& job) { return ctl_json({"show", job, "--json"}); }

  // Polls `show --json` until the job has ended (or `timeout`); returns the last one seen.
  nlohmann::json wait_for_end(const std::string& job,
                              std::chrono::seconds timeout = std::chrono::seconds(120)) {
    nlohmann::json shown;
    wait_until(
        [&] {
          shown = show(job);
          return shown["state"] != "RUNNING" && shown["state"] != "PENDING";
        },
        timeout);
    // First in the test's output, so that a CI log cut after a few lines still says why.
    if (shown["state"] != "SUCCEEDED") {
      std::cerr << "wait_for_end: " << job << " is " << shown["state"] << ": "
                << shown.value("error", std::string()).substr(0, 600) << "\nits last events:\n";
      const auto& events = shown["events"];
      for (size_t i = events.size() > 4 ? events.size() - 4 : 0; i < events.size(); ++i) {
        std::cerr << "  " << events[i].dump().substr(0, 600) << "\n";
      }
    }
    return shown;
  }

  // A ddpctl command that prints JSON, parsed.
  nlohmann::json ctl_json(std::vector<std::string> args) {
    auto o = ctl(std::move(args));
    EXPECT_EQ(o.exit_code, 0) << o.err;
    return nlohmann::json::parse(o.out);
  }

  // Workers by state, from `ddpctl workers`.
  int count_workers(const std::string& state) {
    auto o = ctl({"workers"});
    int n = 0;
    for (size_t at = o.out.find(" " + state + " "); at != std::string::npos;
         at = o.out.find(" " + state + " ", at + 1)) {
      ++n;
    }
    return n;
  }

  bool wait_until(const std::function<bool()>& ready, std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (ready()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return false;
  }

  std::string submit(std::vector<std::string> flags) {
    std::vector<std::string> args{"submit",  "ddp", "--world-size", "2",  "--model",   "tiny",
                                  "--batch", "4",   "--context",    "16", "--threads", "1"};
    args.insert(args.end(), flags.begin(), flags.end());
    auto o = ctl(args);
    EXPECT_EQ(o.exit_code, 0) << o.err;
    return o.out.substr(0, o.out.find('\n'));
  }

  std::string coordinator_log() const { return coordinator_->log(); }

 private:
  std::string name_;
  std::vector<std::string> coordinator_args_;
  std::function<std::vector<std::string>(int)> worker_args_;
  int port_ = 0;
  int restarts_ = 0;
  std::string db_;
  std::unique_ptr<BackgroundProcess> coordinator_;
  std::vector<std::unique_ptr<BackgroundProcess>> workers_;
  std::map<int, int> worker_ports_;  // route_worker's
};

// Every file of the uninterrupted run's --export-hf directory equals the other run's, byte for
// byte.
inline void expect_same_export(const std::string& reference_dir, const std::string& other_dir) {
  ASSERT_TRUE(std::filesystem::exists(reference_dir + "/model.safetensors"));
  for (const auto& entry : std::filesystem::directory_iterator(reference_dir)) {
    const std::string file = entry.path().filename();
    EXPECT_TRUE(read_file(entry.path()) == read_file(other_dir + "/" + file))
        << file << " differs from the uninterrupted run's";
  }
}

// The job's incidents of one kind (show --json's "events"), in order.
inline std::vector<nlohmann::json> events_of(const nlohmann::json& shown, const std::string& kind) {
  std::vector<nlohmann::json> out;
  for (const auto& e : shown["events"]) {
    if (e["kind"] == kind) out.push_back(e);
  }
  return out;
}

// The worker daemon of a rank `rank` of `job` (worker ids are "NAME-wI").
inline int worker_index_of_rank(Cluster& cluster, const std::string& job, int rank) {
  const std::string id = cluster.show(job)["workers"][rank];
  return std::stoi(id.substr(id.rfind("-w") + 2));
}

// The process running rank `rank` of `job` (the one rank process of that rank's worker daemon).
inline int rank_process_of(Cluster& cluster, const std::string& job, int rank) {
  const int daemon = cluster.worker(worker_index_of_rank(cluster, job, rank)).pid();
  int pid = -1;
  cluster.wait_until(
      [&] {
        const auto children = rank_process_pids(daemon);
        if (children.size() == 1) pid = children[0];
        return pid > 0;
      },
      std::chrono::seconds(10));
  return pid;
}

}  // namespace ddpd::testing
