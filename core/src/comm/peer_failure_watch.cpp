#include "comm/peer_failure_watch.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace ddpd::detail {
namespace {

constexpr const char* kCount = "failure_reports";

std::string cause_key(int rank) { return "failure_cause/" + std::to_string(rank); }

}  // namespace

void announce_failure(c10d::Store& store, int rank, CollectiveFailure cause) {
  const std::string& name = enum_name(cause);
  store.set(cause_key(rank), std::vector<uint8_t>(name.begin(), name.end()));
  store.add(kCount, 1);
}

struct PeerFailureWatch::State {
  c10::intrusive_ptr<c10d::Store> store;
  int rank = 0;
  int world_size = 1;
  std::mutex mutex;
  std::condition_variable wake;
  int waiting = 0;  // host waits in progress
  std::chrono::steady_clock::time_point waiting_since;
  bool started = false;
  bool stopped = false;
  std::atomic<bool> seen{false};
  PeerFailure failure;  // written once, before `seen`

  // Step 3: the lowest announcing rank but this one, once the count says there is one.
  std::optional<PeerFailure> poll() const {
    if (store->add(kCount, 0) == 0) return std::nullopt;
    for (int r = 0; r < world_size; ++r) {
      if (r == rank || !store->check({cause_key(r)})) continue;
      const auto bytes = store->get(cause_key(r));
      PeerFailure found{r, CollectiveFailure::kBackend};
      try {
        found.cause = parse_enum<CollectiveFailure>(std::string(bytes.begin(), bytes.end()));
      } catch (const std::exception&) {
      }  // an unknown name is the backend's failure
      return found;
    }
    return std::nullopt;
  }

  void run() {
    std::unique_lock<std::mutex> lock(mutex);
    while (!stopped) {
      if (waiting == 0) {
        wake.wait(lock);
        continue;
      }
      const auto due = waiting_since + kWatchAfter;
      if (std::chrono::steady_clock::now() < due) {
        wake.wait_until(lock, due);
        continue;
      }
      lock.unlock();
      std::optional<PeerFailure> found;
      try {
        found = poll();
      } catch (const std::exception&) {
        return;  // the store is gone (its host exited): no announcement can come any more
      }
      lock.lock();
      if (found) {
        failure = *found;
        seen = true;
        return;
      }
      wake.wait_for(lock, kPollEvery);
    }
  }
};

PeerFailureWatch::PeerFailureWatch(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size)
    : state_(std::make_shared<State>()) {
  state_->store = std::move(store);
  state_->rank = rank;
  state_->world_size = world_size;
}

PeerFailureWatch::~PeerFailureWatch() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->stopped = true;
  state_->wake.notify_all();
}

void PeerFailureWatch::begin_wait() noexcept {
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (state_->waiting++ == 0) state_->waiting_since = std::chrono::steady_clock::now();
  if (!state_->started) {
    state_->started = true;  // tried once: a process out of threads waits unwatched
    try {
      std::thread([state = state_] { state->run(); }).detach();
    } catch (const std::system_error&) {
    }
  }
  state_->wake.notify_all();
}

void PeerFailureWatch::end_wait() noexcept {
  std::lock_guard<std::mutex> lock(state_->mutex);
  --state_->waiting;
}

std::optional<PeerFailure> PeerFailureWatch::reported() const {
  if (!state_->seen.load()) return std::nullopt;
  return state_->failure;
}

}  // namespace ddpd::detail
