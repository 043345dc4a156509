#include "ddpd/core/collective_recorder.h"

#include <algorithm>

#include "comm/collective_check.h"
#include "ddpd/common/seconds_since.h"
#include "ddpd/common/unix_time.h"
#include "device/device.h"

namespace ddpd {
namespace {

// The journal's tag: the part of a span name after "op/" ("all_reduce/bucket3" → "bucket3").
std::string tag_of(const std::string& name) {
  const auto slash = name.find('/');
  return slash == std::string::npos ? name : name.substr(slash + 1);
}

// A collective's launch and completion points, resolved to seconds in take_spans (on CUDA
// they are events the device has to pass first).
struct PendingSpan {
  std::string name;
  Collective op = Collective::kAllReduce;
  detail::TimePoint launch, complete;
  int64_t bytes = 0;
  int64_t seq = 0;  // the collective's journal entry
};

}  // namespace

// Recorded spans; shared with completion callbacks, which run on backend threads.
struct CollectiveRecorder::SpanLog {
  std::mutex mutex;
  std::vector<PendingSpan> spans;
};

CollectiveRecorder::CollectiveRecorder(at::Device device, size_t journal_size)
    : device_(device),
      epoch_(std::chrono::steady_clock::now()),
      unix_epoch_s_(unix_now()),
      spans_(std::make_shared<SpanLog>()),
      journal_(std::make_shared<CollectiveJournal>(journal_size)) {
  timeline_ = detail::make_timeline(device_, [this] { return now(); });
}

CollectiveRecorder::~CollectiveRecorder() = default;

double CollectiveRecorder::unix_seconds(double clock_s) const { return unix_epoch_s_ + clock_s; }

double CollectiveRecorder::now() const { return seconds_since(epoch_); }

std::vector<CommSpan> CollectiveRecorder::take_spans() {
  std::vector<PendingSpan> pending;
  {
    std::lock_guard<std::mutex> lock(spans_->mutex);
    pending.swap(spans_->spans);
  }
  std::vector<CommSpan> out;
  out.reserve(pending.size());
  for (const auto& p : pending) {
    out.push_back(
        {p.name, p.op, timeline_->seconds(p.launch), timeline_->seconds(p.complete), p.bytes});
    // On CUDA the end is known only once the device has passed the completion event.
    if (device_.is_cuda()) journal_->complete(p.seq, out.back().complete_s);
  }
  std::sort(out.begin(), out.end(),
            [](const CommSpan& a, const CommSpan& b) { return a.launch_s < b.launch_s; });
  return out;
}

int64_t CollectiveRecorder::on_launch(const std::string& op, const std::string& name,
                                      const at::Tensor& data) {
  {
    std::lock_guard<std::mutex> lock(traffic_mutex_);
    TrafficCount& count = traffic_[op];
    ++count.calls;
    count.bytes += static_cast<int64_t>(data.nbytes());
  }
  return journal_->enqueue(op, tag_of(name), data.numel(), detail::dtype_name(data.scalar_type()),
                           now());
}

std::map<std::string, TrafficCount> CollectiveRecorder::traffic() const {
  std::lock_guard<std::mutex> lock(traffic_mutex_);
  return traffic_;
}

void CollectiveRecorder::on_work(c10d::Work& work, Collective op, const std::string& name,
                                 int64_t seq, int64_t bytes, const detail::TimePoint& launch) {
  PendingSpan span{name, op, launch, {}, bytes, seq};
  auto log = spans_;
  if (device_.is_cuda()) {
    // NCCL completes the work's future at launch; the device says when it really finished.
    span.complete = timeline_->mark_completion(work);
    std::lock_guard<std::mutex> lock(log->mutex);
    log->spans.push_back(std::move(span));
    return;
  }
  // Completion time comes from the work's future, set by the backend thread that finishes it.
  work.getFuture()->addCallback(
      [log, journal = journal_, epoch = epoch_, span](c10::ivalue::Future& future) mutable {
        span.complete.host_s = seconds_since(epoch);
        if (future.hasError()) {
          journal->fail(span.seq, span.complete.host_s);
          return;
        }
        journal->complete(span.seq, span.complete.host_s);
        std::lock_guard<std::mutex> lock(log->mutex);
        log->spans.push_back(std::move(span));
      });
}

}  // namespace ddpd
