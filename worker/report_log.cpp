#include "report_log.h"

#include <algorithm>

namespace ddpd {

ReportLog::ReportLog(int64_t max_bytes) : max_bytes_(max_bytes) {}

uint64_t ReportLog::push(v1::WorkerMessage message) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int64_t bytes = static_cast<int64_t>(message.ByteSizeLong());
  if (message.has_step() && kept_bytes_ + bytes > max_bytes_) {
    ++dropped_;
    return 0;
  }
  const uint64_t seq = next_seq_++;
  message.set_seq(seq);
  kept_.push_back({std::move(message), bytes});
  kept_bytes_ += bytes;
  due_.notify_all();
  return seq;
}

void ReportLog::acknowledge(uint64_t seq) {
  std::lock_guard<std::mutex> lock(mutex_);
  acknowledged_ = std::max(acknowledged_, seq);
  while (!kept_.empty() && kept_.front().message.seq() <= seq) {
    kept_bytes_ -= kept_.front().bytes;
    kept_.pop_front();
  }
}

void ReportLog::rewind() {
  std::lock_guard<std::mutex> lock(mutex_);
  sent_through_ = acknowledged_;
  interrupted_ = false;
}

std::optional<v1::WorkerMessage> ReportLog::next_to_send(std::chrono::duration<double> timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto due = [&]() -> const v1::WorkerMessage* {
    auto it = std::upper_bound(kept_.begin(), kept_.end(), sent_through_,
                               [](uint64_t seq, const Kept& k) { return seq < k.message.seq(); });
    return it == kept_.end() ? nullptr : &it->message;
  };
  due_.wait_for(lock, timeout, [&] { return interrupted_ || due() != nullptr; });
  const v1::WorkerMessage* next = interrupted_ ? nullptr : due();
  if (!next) return std::nullopt;
  sent_through_ = next->seq();
  v1::WorkerMessage copy = *next;
  copy.set_reports_dropped(dropped_);
  return copy;
}

void ReportLog::interrupt() {
  std::lock_guard<std::mutex> lock(mutex_);
  interrupted_ = true;
  due_.notify_all();
}

int64_t ReportLog::dropped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return dropped_;
}

int64_t ReportLog::kept_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return kept_bytes_;
}

size_t ReportLog::kept() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return kept_.size();
}

uint64_t ReportLog::acknowledged() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return acknowledged_;
}

}  // namespace ddpd
