#include "session_outbox.h"

#include <spdlog/spdlog.h>

namespace ddpd::coordinator {

SessionOutbox::SessionOutbox(grpc::ServerContext* context, Stream* stream, std::string worker_id,
                             int64_t max_queued_bytes)
    : context_(context),
      stream_(stream),
      worker_id_(std::move(worker_id)),
      max_queued_bytes_(max_queued_bytes),
      writer_([this] { write_loop(); }) {}

SessionOutbox::~SessionOutbox() { close(); }

bool SessionOutbox::send(const v1::CoordinatorMessage& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (closed_) return false;
  const int64_t bytes = static_cast<int64_t>(message.ByteSizeLong());
  if (queued_bytes_ + bytes > max_queued_bytes_) {
    overflowed_ = "stopped reading: " + std::to_string(queue_.size()) + " messages (" +
                  std::to_string(queued_bytes_) +
                  " bytes) unsent, over --max-session-queue-bytes " +
                  std::to_string(max_queued_bytes_);
    spdlog::warn("worker={} {}; session cancelled", worker_id_, overflowed_);
    closed_ = true;
    queue_.clear();
    queued_bytes_ = 0;
    context_->TryCancel();  // the stuck Write returns false and the handler's Read ends
    wake_.notify_all();
    return false;
  }
  queue_.push_back(message);
  queued_bytes_ += bytes;
  wake_.notify_all();
  return true;
}

void SessionOutbox::write_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return closed_ || !queue_.empty(); });
    if (closed_) return;
    v1::CoordinatorMessage message = std::move(queue_.front());
    queue_.pop_front();
    queued_bytes_ -= static_cast<int64_t>(message.ByteSizeLong());
    writing_ = true;
    lock.unlock();
    const bool ok = stream_->Write(message);
    lock.lock();
    writing_ = false;
    if (!ok) {  // the stream is broken: the handler's Read notices and reports the worker lost
      closed_ = true;
      queue_.clear();
      queued_bytes_ = 0;
      return;
    }
  }
}

void SessionOutbox::close() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    if (writing_) context_->TryCancel();  // a Write to a peer that stopped reading never returns
    wake_.notify_all();
  }
  if (writer_.joinable()) writer_.join();
}

std::string SessionOutbox::overflowed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return overflowed_;
}

}  // namespace ddpd::coordinator
