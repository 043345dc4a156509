#include "comm/failure_exchange.h"

#include <future>
#include <memory>
#include <stdexcept>
#include <thread>

#include "comm/peer_failure_watch.h"
#include "comm/shared_memory_capability.h"
#include "ddpd/core/communicator.h"

namespace ddpd::detail {

std::vector<std::optional<std::string>> exchange_reports_on(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
    const std::vector<bool>& gone, CollectiveFailure cause, const std::string& report,
    std::chrono::milliseconds wait, const std::function<void()>& posted) {
  // Protocol (every failing rank runs it once; a rank stuck in compute may never join):
  //  0. announce the failure, so that a peer still blocked in a Gloo collective (on this rank,
  //     say) stops waiting and joins (peer_failure_watch.h);
  //  1. write failure_report/<rank>;
  //  2. read the others' reports until all are there or `wait` has passed;
  //  3. write failure_report_read/<rank>;
  //  4. rank 0 serves the store, so before it returns (and its process exits, taking the store
  //     with it) it waits, briefly, until every rank that reported has also finished reading.
  //     Without step 4 a rank whose deadline falls a moment after rank 0's loses the store in
  //     the middle of step 2.
  std::vector<std::optional<std::string>> reports(world_size);
  reports[rank] = report;
  auto key = [](const char* what, int rank) { return std::string(what) + std::to_string(rank); };
  auto put = [&](const std::string& k, const std::string& value) {
    store->set(k, std::vector<uint8_t>(value.begin(), value.end()));
  };
  announce_failure(*store, rank, cause);
  put(key("failure_report/", rank), report);
  posted();
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (true) {
    bool all = true;
    for (int r = 0; r < world_size; ++r) {
      if (reports[r] || gone[r]) continue;
      if (store->check({key("failure_report/", r)})) {
        const auto bytes = store->get(key("failure_report/", r));
        reports[r] = std::string(bytes.begin(), bytes.end());
      } else {
        all = false;
      }
    }
    if (all || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  put(key("failure_report_read/", rank), "1");
  if (rank != 0) return reports;
  // The readers' deadlines differ from ours by their collective's start: allow one more `wait`
  // plus a little, and never for a rank that did not report (it may never come).
  const auto readers_deadline =
      std::chrono::steady_clock::now() + wait + std::chrono::milliseconds(500);
  for (int r = 0; r < world_size; ++r) {
    if (!reports[r]) continue;
    while (!store->check({key("failure_report_read/", r)}) &&
           std::chrono::steady_clock::now() < readers_deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  return reports;
}

std::vector<std::optional<std::string>> exchange_failure_reports(const Communicator& comm,
                                                                 CollectiveFailure cause,
                                                                 const std::string& report,
                                                                 std::chrono::milliseconds wait) {
  const int rank = comm.info().rank, world_size = comm.info().world_size;
  std::vector<std::optional<std::string>> own(world_size);
  own[rank] = report;
  if (!comm.store()) return own;
  // Ranks the shared-memory segment shows gone will never report: no wait for them.
  std::vector<bool> gone(world_size, false);
  if (comm.shared_memory() != nullptr) gone = comm.shared_memory()->gone_ranks();
  // On its own thread, so that the rank never waits on it past its deadline: LibTorch 2.x's
  // TCPStore client reads check()'s answer with no socket timeout, and with the store's host
  // cut off (a partition) the read never returned, holding the rank past cancel and every
  // deadline. The thread holds only copies (the store, the inputs, the result's state); a
  // thread left blocked on a dead connection ends with the process.
  struct Exchange {
    std::promise<void> posted;
    std::promise<std::vector<std::optional<std::string>>> result;
  };
  auto exchange = std::make_shared<Exchange>();
  auto posted = exchange->posted.get_future();
  auto future = exchange->result.get_future();
  std::thread([exchange, store = comm.store(), rank, world = world_size, gone, cause, report,
               wait] {
    try {
      exchange->result.set_value(exchange_reports_on(store, rank, world, gone, cause, report, wait,
                                                     [&] { exchange->posted.set_value(); }));
    } catch (...) {
      exchange->result.set_exception(std::current_exception());
    }
  }).detach();
  // A reachable store takes this rank's report in a round trip; one cut off never answers (the
  // partition test: 18 s more of waiting for nothing, past its timeout + 10 s budget).
  constexpr auto kStoreAnswersWithin = std::chrono::seconds(2);
  const auto answer_deadline = std::chrono::steady_clock::now() + kStoreAnswersWithin;
  while (posted.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
    if (future.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      return future.get();  // the store refused the report: its error
    }
    if (std::chrono::steady_clock::now() >= answer_deadline) {
      throw std::runtime_error("it did not take this rank's report within 2 s");
    }
  }
  // Rank 0 may wait up to twice `wait` (its step 4), the others once, plus the store's round
  // trips.
  const auto limit = (rank == 0 ? 2 : 1) * wait + kStoreAnswersWithin;
  if (future.wait_for(limit) != std::future_status::ready) return own;
  return future.get();
}

}  // namespace ddpd::detail
