// Gradient all-reduces overlapping backward, modelled once: `ddpctl plan bucket`'s advisor
// (client/src/bucket_advisor.h) and `whatif`'s replay (step_replay.h) both run it, so a change
// to the bucketing rule (bucket_assignment.h, which the core's synchronisers use) reaches both.
// Pure arithmetic.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "ddpd/common/intervals.h"

namespace ddpd {

// A collective's seconds at full speed for `bytes` per rank.
using CollectiveCost = std::function<double(double bytes)>;

// The link as a queue: one collective at a time, in launch order (the communicator's), at full
// speed while the rank waits and at `speed_while_computing` of it while the rank computes
// (compute and the transport's threads share the cores). A speed under 0.001 counts as 0.001.
class LinkQueue {
 public:
  LinkQueue(CollectiveCost cost, double speed_while_computing);
  // The rank computes during [begin, end) (added in time order).
  void computing(double begin, double end);
  // Completion of a collective launched at `launch_s` moving `bytes` per rank at `per_byte`
  // times the cost's rate (a broadcast or all-gather moves half an all-reduce's).
  double run(double launch_s, double bytes, double per_byte = 1.0);
  double free_at() const { return free_at_; }
  double busy_s() const { return busy_s_; }

 private:
  CollectiveCost cost_;
  double speed_while_computing_;
  std::vector<Interval> busy_;
  double free_at_ = 0;
  double busy_s_ = 0;
};

// Bucketed DDP's all-reduces: (launch second, bytes) of each bucket, in launch order. The
// gradients, whose `bytes` and `ready_s` (when backward makes each ready) are given by index,
// are taken in ready order and packed as the core packs them (assign_buckets, with the first
// bucket at most kFirstBucketMiB and never over `bucket_mb`); a bucket launches once its last
// gradient is ready and after the bucket before.
std::vector<std::pair<double, double>> bucket_launches(const std::vector<double>& ready_s,
                                                       const std::vector<int64_t>& bytes,
                                                       double bucket_mb);

}  // namespace ddpd
