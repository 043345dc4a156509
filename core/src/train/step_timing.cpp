#include "train/step_timing.h"

#include "ddpd/common/intervals.h"

namespace ddpd::detail {

StepTiming step_timing(const StepMarks& m, const std::vector<CommSpan>& collectives) {
  StepTiming t;
  t.step_seconds = m.end - m.start - m.measure_seconds;
  t.phases = {{"zero_grad", m.start, m.zeroed}, {"gather", m.zeroed, m.gathered}};
  for (size_t i = 0; i + 2 < m.micro_marks.size(); i += 2) {
    const double begin = m.micro_marks[i], forwarded = m.micro_marks[i + 1],
                 end = m.micro_marks[i + 2];
    t.forward_seconds += forwarded - begin;
    t.backward_seconds += end - forwarded;
    t.phases.push_back({"forward", begin, forwarded});
    t.phases.push_back({"backward", forwarded, end});
  }
  const double backward_end = m.micro_marks.empty() ? m.gathered : m.micro_marks.back();
  t.optimizer_seconds = m.end - m.optimizer_start + m.overlapped_optimizer_seconds;
  std::vector<Interval> spans;
  for (const auto& c : collectives) {
    spans.push_back({c.launch_s, c.complete_s});
    if (c.op == Collective::kAllReduce || c.op == Collective::kReduceScatter) {
      t.gradient_sync_bytes += c.bytes;
    }
  }
  t.comm_seconds = covered_seconds(std::move(spans), {m.start, m.end});
  t.exposed_comm_seconds = (m.gathered - m.zeroed) +
                           (m.synced - backward_end - m.overlapped_optimizer_seconds) +
                           m.broadcast_seconds;
  t.phases.push_back({"wait", backward_end, m.synced});
  t.phases.push_back({"optimizer", m.optimizer_start, m.end});
  return t;
}

}  // namespace ddpd::detail
