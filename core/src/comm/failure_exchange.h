// The failure-report exchange after a failed collective (the protocol in failure_exchange.cpp),
// through the communicator's rendezvous store. exchange_failure_reports runs it on a thread of
// its own and bounds the rank's wait; the cross-rank analysis (train/failure_analysis.h) reads the
// reports.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ddpd/common/collective_failure.h"

namespace ddpd {
class Communicator;
}

namespace ddpd::detail {

// After a failed collective: writes this rank's `report` to `comm`'s store and collects the other
// ranks' for up to `wait` (a rank stuck in compute never writes). By rank; this rank's own
// included. Rank 0, which serves the store, returns only once every rank that reported has
// finished reading (or after one more `wait`), so its exit cannot cut the others off. Ranks the
// shm segment shows gone are not waited for. Throws std::runtime_error when the store cannot be
// reached (rank 0 has exited). Call at most once per communicator.
// Before its report the rank announces `cause` to its peers' waits (comm/peer_failure_watch.h).
std::vector<std::optional<std::string>> exchange_failure_reports(const Communicator& comm,
                                                                 CollectiveFailure cause,
                                                                 const std::string& report,
                                                                 std::chrono::milliseconds wait);

// Announces `cause` (peer_failure_watch.h), writes this rank's `report`, calls `posted`, and reads
// the others' until all are in or `wait` has passed (ranks marked `gone` are not waited for).
// Returns the reports by rank.
std::vector<std::optional<std::string>> exchange_reports_on(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
    const std::vector<bool>& gone, CollectiveFailure cause, const std::string& report,
    std::chrono::milliseconds wait, const std::function<void()>& posted);

}  // namespace ddpd::detail
