#include "ddpd/core/collective_journal.h"

#include <algorithm>
#include <stdexcept>

namespace ddpd {

const char* to_string(CollectiveState state) {
  switch (state) {
    case CollectiveState::kEnqueued:
      return "enqueued";
    case CollectiveState::kCompleted:
      return "completed";
    case CollectiveState::kFailed:
      return "failed";
  }
  return "unknown";
}

CollectiveJournal::CollectiveJournal(size_t capacity) {
  if (capacity == 0) throw std::invalid_argument("--journal-size: must be >= 1");
  ring_.resize(capacity);
}

int64_t CollectiveJournal::enqueue(std::string op, std::string tag, int64_t numel,
                                   std::string dtype, double now_s) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int64_t seq = ++last_enqueued_;
  JournalEntry& slot = ring_[(seq - 1) % ring_.size()];
  slot.seq = seq;
  slot.op = std::move(op);
  slot.tag = std::move(tag);
  slot.numel = numel;
  slot.dtype = std::move(dtype);
  slot.state = CollectiveState::kEnqueued;
  slot.enqueued_s = now_s;
  slot.ended_s = 0;
  return seq;
}

void CollectiveJournal::end(int64_t seq, CollectiveState state, double now_s) {
  std::lock_guard<std::mutex> lock(mutex_);
  JournalEntry& slot = ring_[(seq - 1) % ring_.size()];
  if (slot.seq != seq || slot.state != CollectiveState::kEnqueued) return;
  slot.state = state;
  slot.ended_s = now_s;
  if (state == CollectiveState::kCompleted) last_completed_ = std::max(last_completed_, seq);
}

void CollectiveJournal::complete(int64_t seq, double now_s) {
  end(seq, CollectiveState::kCompleted, now_s);
}

void CollectiveJournal::fail(int64_t seq, double now_s) {
  end(seq, CollectiveState::kFailed, now_s);
}

std::vector<JournalEntry> CollectiveJournal::entries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<JournalEntry> out;
  const int64_t held = std::min<int64_t>(last_enqueued_, static_cast<int64_t>(ring_.size()));
  out.reserve(held);
  for (int64_t seq = last_enqueued_ - held + 1; seq <= last_enqueued_; ++seq) {
    out.push_back(ring_[(seq - 1) % ring_.size()]);
  }
  return out;
}

JournalProgress CollectiveJournal::progress() const {
  std::lock_guard<std::mutex> lock(mutex_);
  JournalProgress p;
  p.last_enqueued = last_enqueued_;
  p.last_completed = last_completed_;
  // Oldest first: the first entry still enqueued. Called once per heartbeat, so a scan of the
  // ring is cheap next to what it saves the recording path.
  const int64_t held = std::min<int64_t>(last_enqueued_, static_cast<int64_t>(ring_.size()));
  for (int64_t seq = last_enqueued_ - held + 1; seq <= last_enqueued_; ++seq) {
    const JournalEntry& e = ring_[(seq - 1) % ring_.size()];
    if (e.state == CollectiveState::kEnqueued) {
      p.oldest_pending = e;
      break;
    }
  }
  return p;
}

nlohmann::json journal_json(const CollectiveJournal& journal) {
  const auto progress = journal.progress();
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& e : journal.entries()) {
    entries.push_back({{"seq", e.seq},
                       {"op", e.op},
                       {"tag", e.tag},
                       {"numel", e.numel},
                       {"dtype", e.dtype},
                       {"state", to_string(e.state)},
                       {"enqueued_s", e.enqueued_s},
                       {"ended_s", e.ended_s}});
  }
  return {{"capacity", journal.capacity()},
          {"last_enqueued", progress.last_enqueued},
          {"last_completed", progress.last_completed},
          {"entries", entries}};
}

}  // namespace ddpd
