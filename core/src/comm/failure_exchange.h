// The failure-report exchange after a failed collective (the protocol below), through the
// rendezvous store. Communicator::exchange_failure_reports runs it on a thread of its own and
// bounds the rank's wait; the cross-rank analysis (train/failure_analysis.h) reads the reports.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ddpd::detail {

// Writes this rank's `report`, calls `posted`, and reads the others' until all are in or `wait`
// has passed (ranks marked `gone` are not waited for). Returns the reports by rank.
std::vector<std::optional<std::string>> exchange_reports_on(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
    const std::vector<bool>& gone, const std::string& report, std::chrono::milliseconds wait,
    const std::function<void()>& posted);

}  // namespace ddpd::detail
