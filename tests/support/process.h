// Spawns real processes for multi-rank tests (the gloo base_test.h idea, with processes).
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "ddpd/common/net.h"  // wait_for_port
#include "ddpd/common/unix_time.h"

namespace ddpd::testing {

// A port no process listens on, for a test's server, from below the kernel's ephemeral range
// (ip_local_port_range). free_port() lets the kernel pick one from that range, where any
// process's outgoing connection may take it before the server binds it: a rendezvous failed so
// (EADDRINUSE) in one clean-clone run of about 680 tests. Nor from the worker daemons'
// rendezvous range (net.h): a worker holds its port only between jobs, by convention, and a
// test's server bound there meanwhile would fail that worker's next job as rank 0.
int unused_port();

struct ProcessOutcome {
  int exit_code = -1;  // -1: killed after the deadline
  bool timed_out = false;
  double exited_unix_s = 0;  // when the exit was seen (within 20 ms), unix seconds
  std::string out;
  std::string err;
};

// Runs `argv` with `env` added to this process's environment; kills it at `timeout`.
ProcessOutcome run_process(const std::vector<std::string>& argv,
                           const std::map<std::string, std::string>& env,
                           std::chrono::seconds timeout);

// Starts `world_size` copies of `argv` with MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE/LOCAL_RANK
// set, waits for all (killing every one still running at `timeout`), returns them by rank.
std::vector<ProcessOutcome> run_ranks(const std::vector<std::string>& argv, int world_size,
                                      std::chrono::seconds timeout,
                                      const std::map<std::string, std::string>& extra_env = {});

// run_ranks, and beside the ranks one more process per `spares` entry: its argv, with the same
// endpoint and world size and the entry's RANK (a replacement that joins a healed group).
// Returned after the ranks, in the order given.
std::vector<ProcessOutcome> run_ranks_with_spares(
    const std::vector<std::string>& argv, int world_size, std::chrono::seconds timeout,
    const std::vector<std::pair<int, std::vector<std::string>>>& spares);

// The wall clock as unix seconds (comparable across processes on this host).
using ddpd::unix_now;

// The live children of process `pid` (from /proc/*/stat), lowest pid first; with `name`, only
// those whose process name (comm) it is.
std::vector<int> child_pids(int pid, const std::string& name = "");

// The rank processes a worker daemon runs: its children named "ddpd-rank" (worker/rank_main.h's
// kRankProcessName), leaving out the one it keeps started ahead for its next assignment.
inline std::vector<int> rank_process_pids(int daemon) { return child_pids(daemon, "ddpd-rank"); }

// Directory holding the test binaries (from /proc/self/exe).
std::string binary_dir();
std::string temp_dir();

}  // namespace ddpd::testing

namespace ddpd::testing {

// A daemon started for a test; killed (SIGKILL) on destruction if still running.
class BackgroundProcess {
 public:
  BackgroundProcess(const std::vector<std::string>& argv,
                    const std::map<std::string, std::string>& env, const std::string& log_name);
  ~BackgroundProcess();
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;

  int pid() const { return pid_; }
  void signal(int sig);
  // Waits for exit up to `timeout`; returns the exit code, or -1 if still running.
  int wait(std::chrono::seconds timeout);
  std::string log() const;

 private:
  int pid_ = -1;
  std::string log_path_;
};

}  // namespace ddpd::testing
