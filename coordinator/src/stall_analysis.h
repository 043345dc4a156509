// What the coordinator says about a job in which no rank has completed a collective or a step
// for a while: which ranks wait in which collective, and which ranks have not joined it and
// where they are, or that ranks launched different collectives under one sequence number.
// Pure: it reads the ranks' last heartbeats (their collective journals' progress) and nothing
// else, so it is tested with hand-made progress.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ddpd/v1/ddpd.pb.h"

namespace ddpd::coordinator {

struct RankReport {
  int rank = 0;
  std::optional<v1::RankProgress> progress;  // none: no heartbeat with progress yet
};

struct StallFinding {
  std::string kind;  // stall | desync
  int rank = -1;     // the rank it names (first missing, or first diverging); -1: none
  std::string message;
};

// `stalled_seconds`: how long nothing has completed.
StallFinding analyze_stall(const std::vector<RankReport>& ranks, double stalled_seconds);

// "all_reduce #1043 (bucket3, 4.2 MB)".
std::string describe_collective(const v1::PendingCollective& collective);

}  // namespace ddpd::coordinator
