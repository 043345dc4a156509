// `ddpd-worker rank`: one rank of one job, in the process its daemon started for it
// (rank_process.h has the protocol). Not for users: the daemon runs it.
#pragma once

#include <string>

namespace ddpd {

// The rank process's name (/proc/PID/comm) once it has read its assignment; before, it bears
// the executable's.
constexpr char kRankProcessName[] = "ddpd-rank";

struct RankMainOptions {
  std::string advertise_host = "127.0.0.1";  // the daemon's: where the other ranks reach us
  int cuda_device = 0;                       // the daemon's GPU for NCCL jobs
  double progress_seconds = 1.0;             // between Progress events while a DDP job runs
  int daemon_pid = 0;                        // the daemon that started us (0: not checked)
  std::string worker_id;                     // the daemon's, named in errors
};

// Reads the Assignment from stdin, runs it, writes its events to fd 3. Returns the exit
// status: 0 once the result is written (whatever it says), 2 without an assignment.
int run_rank_process(const RankMainOptions& options);

}  // namespace ddpd
