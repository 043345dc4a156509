// Per-rank timelines of a finished (or running) job, from the spans its workers reported.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "ddpd/v1/ddpd.pb.h"

namespace ddpd::client {

// Chrome trace event format (opens in Perfetto and chrome://tracing): one process per rank;
// thread 0 holds each step ("step K") with its phases nested inside (zero_grad, gather,
// forward, backward, wait, optimizer); threads 1.. hold collectives from launch to completion,
// in as few lanes as keep overlapping collectives apart. Times in µs from the job's first span.
// Throws std::runtime_error when the reply holds no spans (comm jobs, or steps not fetched).
nlohmann::json chrome_trace(const v1::GetJobReply& reply);

// How much of one rank's communication ran while backward was still computing.
struct RankOverlap {
  int rank = 0;
  int steps = 0;
  double backward_seconds = 0;    // sum over steps
  double comm_seconds = 0;        // union of the collectives' spans, summed over steps
  double overlapped_seconds = 0;  // the part of comm_seconds inside backward
};
std::vector<RankOverlap> overlap_by_rank(const v1::GetJobReply& reply);
// One line per rank: communication and overlap per step, in ms.
std::string overlap_table(const std::vector<RankOverlap>& ranks);

}  // namespace ddpd::client
