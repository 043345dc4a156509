// The cross-rank analysis after a failed collective (docs/diagnosis.md, "Standalone runs"):
// every rank that saw the failure publishes its position through the rendezvous store, waits
// for the others' for a bounded time, and runs the coordinator's stall analysis on what it got,
// as c10d's desync report does.
#pragma once

#include <cstdint>
#include <string>

#include "ddpd/common/stall_analysis.h"
#include "ddpd/core/collective_journal.h"
#include "ddpd/core/communicator.h"

namespace ddpd::detail {

// A journal entry as the stall analysis reads it, aged at `now_s` (the communicator's clock).
CollectiveRecord to_record(const JournalEntry& entry, double now_s);

// This rank's position after a failed collective: its phase and step, and the first collective
// its journal does not count as completed as the one it waits in (the journal counts a failed
// collective as ended, but it is the one the ranks did not finish together).
RankPosition failed_position(const Communicator& comm, const std::string& phase, int64_t step);

// Exchanges positions and returns the finding: the rank it names (-1: none), and its message
// "cross-rank analysis: …" (also printed to stderr as "ddpd: rank R cross-rank analysis: …"), or
// why it could not run. After a peer's end (`cause`) the survivors learn it at about the same
// time, so they wait 2 s for each other's reports; after a timeout, up to the collective
// timeout, at most 5 s.
StallFinding analyze_failure_across_ranks(Communicator& comm, const RankPosition& mine,
                                          CollectiveFailure cause);

}  // namespace ddpd::detail
