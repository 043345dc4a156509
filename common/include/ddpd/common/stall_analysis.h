// What to say about ranks that stopped making progress: which ranks wait in which collective,
// which ranks have not joined it and where they are, or that ranks launched different
// collectives under one sequence number (a desync). Pure: it reads each rank's position (its
// phase and step, and its collective journal's progress) and nothing else. The coordinator runs
// it on heartbeats (a live stall); a standalone rank runs it on the positions its peers wrote to
// the TCPStore after a collective failed. Tested with hand-made positions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ddpd/common/incident_kind.h"
#include "ddpd/common/job_options.h"

namespace ddpd {

// A collective a rank has launched and not completed.
struct CollectiveRecord {
  int64_t seq = 0;  // per process group, the same on every rank
  std::string op;
  std::string tag;
  int64_t numel = 0;
  std::string dtype;
  double age_seconds = 0;  // since it was enqueued
};

// Where a rank is.
struct RankPosition {
  std::string phase;  // setup | forward | backward | sync | optimizer | metrics | idle
  int64_t step = 0;
  int64_t last_enqueued = 0;
  int64_t last_completed = 0;
  std::optional<CollectiveRecord> oldest_pending;  // none: not waiting in a collective
};

struct RankReport {
  int rank = 0;
  std::optional<RankPosition> position;  // none: nothing heard from it
};

struct StallFinding {
  IncidentKind kind = IncidentKind::kStall;  // kStall or kDesync
  int rank = -1;  // the rank it names (first missing, or first diverging); -1: none
  std::string message;
};

// `stalled_seconds`: how long nothing has completed. `unheard`: how to describe a rank without a
// position ("no progress reported yet" for the coordinator, "did not report: ..." standalone).
StallFinding analyze_stall(const std::vector<RankReport>& ranks, double stalled_seconds,
                           const std::string& unheard = "no progress reported yet");

// "all_reduce #1043 (bucket3, 4.2 MB)".
std::string describe_collective(const CollectiveRecord& collective);
// "all_gather(4096 × float32) [param5]".
std::string collective_signature(const CollectiveRecord& collective);

}  // namespace ddpd
