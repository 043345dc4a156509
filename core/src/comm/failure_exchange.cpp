#include "comm/failure_exchange.h"

#include <thread>

namespace ddpd::detail {

std::vector<std::optional<std::string>> exchange_reports_on(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
    const std::vector<bool>& gone, const std::string& report, std::chrono::milliseconds wait,
    const std::function<void()>& posted) {
  // Protocol (every failing rank runs it once; a rank stuck in compute may never join):
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

}  // namespace ddpd::detail
