#include "ddpd/common/overlap_model.h"

#include <algorithm>
#include <numeric>

#include "ddpd/common/bucket_assignment.h"

namespace ddpd {

LinkQueue::LinkQueue(CollectiveCost cost, double speed_while_computing)
    : cost_(std::move(cost)), speed_while_computing_(std::max(speed_while_computing, 1e-3)) {}

void LinkQueue::computing(double begin, double end) {
  if (end > begin) busy_.push_back({begin, end});
}

double LinkQueue::run(double launch_s, double bytes, double per_byte) {
  const double start = std::max(launch_s, free_at_);
  double work = cost_(bytes * per_byte);  // seconds at full speed
  const double sigma = speed_while_computing_;
  double t = start;
  for (const auto& b : busy_) {
    if (b.end <= t) continue;
    if (t < b.begin) {  // waiting: full speed
      const double idle = std::min(work, b.begin - t);
      t += idle;
      work -= idle;
      if (work <= 0) break;
    }
    const double from = std::max(t, b.begin);
    if ((b.end - from) * sigma >= work) {
      t = from + work / sigma;
      work = 0;
      break;
    }
    work -= (b.end - from) * sigma;
    t = b.end;
  }
  t += std::max(0.0, work);
  busy_s_ += t - start;
  free_at_ = t;
  return t;
}

std::vector<std::pair<double, double>> bucket_launches(const std::vector<double>& ready_s,
                                                       const std::vector<int64_t>& bytes,
                                                       double bucket_mb) {
  constexpr double kMiB = 1024.0 * 1024.0;
  std::vector<size_t> order(ready_s.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return ready_s[x] < ready_s[y]; });
  const auto cap = std::max<int64_t>(1, static_cast<int64_t>(bucket_mb * kMiB));
  const auto first =
      std::max<int64_t>(1, static_cast<int64_t>(std::min(kFirstBucketMiB, bucket_mb) * kMiB));
  std::vector<std::pair<double, double>> launches;
  double launch = 0;
  for (const auto& bucket : assign_buckets(order, bytes, 1, cap, first)) {
    double bucket_bytes = 0;
    for (size_t i : bucket) {
      launch = std::max(launch, ready_s[i]);
      bucket_bytes += static_cast<double>(bytes[i]);
    }
    launches.push_back({launch, bucket_bytes});
  }
  return launches;
}

}  // namespace ddpd
