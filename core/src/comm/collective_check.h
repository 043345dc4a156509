// --check-collectives (docs/diagnosis.md): before each collective every rank's fingerprint
// (sequence number, op, element count, dtype) is all-gathered and compared, and the ranks that
// launched something other than the majority are named, as c10d's TORCH_DISTRIBUTED_DEBUG=DETAIL
// does with its ProcessGroupWrapper. One small all-gather per collective: bucketed +20 % a step,
// naive +38 %, measured in docs/diagnosis.md; for finding a desync, not for training.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <chrono>
#include <cstdint>
#include <string>

#include "comm/collective_names.h"  // dtype_name, which the journal takes from here too
#include "comm/decorating_backend.h"

namespace ddpd::detail {

// The check as a wrapper around the group (comm/decorating_backend.h). Its sequence numbers
// count the collectives that reach it from 1, as the journal's do (a skipped collective,
// comm/skip_injection.h, reaches neither the check nor the peers).
class DesyncCheckBackend final : public DecoratingBackend {
 public:
  DesyncCheckBackend(c10::intrusive_ptr<c10d::Backend> inner, at::Device device,
                     std::chrono::milliseconds timeout);

 protected:
  c10::intrusive_ptr<c10d::Work> intercept(const LaunchedCollective& collective) override;

 private:
  at::Device device_;
  std::chrono::milliseconds timeout_;
  int64_t launched_ = 0;
};

struct CollectiveFingerprint {
  int64_t seq = 0;
  std::string op;  // all_reduce | broadcast | all_gather | reduce_scatter | barrier
  int64_t numel = 0;
  at::ScalarType dtype = at::kFloat;
};

// Compares `mine` across the group's ranks (a blocking all-gather on `device`, bounded by
// `timeout`). Throws CollectiveDesync naming the first rank that differs from the majority, or
// CollectiveError when the all-gather itself fails.
void check_fingerprint(c10d::Backend& group, int world_size, const at::Device& device,
                       std::chrono::milliseconds timeout, const CollectiveFingerprint& mine);

}  // namespace ddpd::detail
