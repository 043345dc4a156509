#include "train/failure_analysis.h"

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "comm/failure_exchange.h"

namespace ddpd::detail {
namespace {

// Long enough for the peers' own timeouts, which follow ours by the gap between the ranks'
// entries into the collective (a step's spread at most), and short enough that a survivor whose
// store host is cut off is idle by its timeout + 10 s: 10 s here made that 18 s.
constexpr auto kWaitAfterTimeout = std::chrono::milliseconds(5000);
constexpr auto kWaitAfterExit = std::chrono::milliseconds(2000);

nlohmann::json position_json(const RankPosition& p) {
  nlohmann::json j{{"phase", p.phase},
                   {"step", p.step},
                   {"last_enqueued", p.last_enqueued},
                   {"last_completed", p.last_completed}};
  if (p.oldest_pending) {
    const auto& c = *p.oldest_pending;
    j["oldest_pending"] = {{"seq", c.seq},     {"op", c.op},       {"tag", c.tag},
                           {"numel", c.numel}, {"dtype", c.dtype}, {"age_seconds", c.age_seconds}};
  }
  return j;
}

RankPosition position_from_json(const nlohmann::json& j) {
  RankPosition p{j.at("phase"), j.at("step"), j.at("last_enqueued"), j.at("last_completed"),
                 std::nullopt};
  if (j.contains("oldest_pending")) {
    const auto& c = j["oldest_pending"];
    p.oldest_pending = CollectiveRecord{c.at("seq"),   c.at("op"),    c.at("tag"),
                                        c.at("numel"), c.at("dtype"), c.at("age_seconds")};
  }
  return p;
}

}  // namespace

CollectiveRecord to_record(const JournalEntry& e, double now_s) {
  return {e.seq, e.op, e.tag, e.numel, e.dtype, now_s - e.enqueued_s};
}

RankPosition failed_position(const Communicator& comm, const std::string& phase, int64_t step) {
  const auto journal = comm.recorder().journal().progress();
  RankPosition mine{phase, step, journal.last_enqueued, journal.last_completed, std::nullopt};
  const double now_s = comm.recorder().now();
  for (const auto& e : comm.recorder().journal().entries()) {
    if (e.state != CollectiveState::kCompleted) {
      mine.oldest_pending = to_record(e, now_s);
      break;
    }
  }
  return mine;
}

StallFinding analyze_failure_across_ranks(Communicator& comm, const RankPosition& mine,
                                          CollectiveFailure cause) {
  const auto wait =
      std::min(comm.info().timeout, peer_ended(cause) ? kWaitAfterExit : kWaitAfterTimeout);
  std::vector<std::optional<std::string>> reports;
  try {
    reports = detail::exchange_failure_reports(comm, cause, position_json(mine).dump(), wait);
  } catch (const std::exception& e) {
    StallFinding unavailable;
    unavailable.message =
        "cross-rank analysis unavailable: the rendezvous store is unreachable (rank 0, which "
        "serves it, has exited?): " +
        std::string(e.what());
    return unavailable;
  }
  std::vector<RankReport> ranks;
  for (int r = 0; r < static_cast<int>(reports.size()); ++r) {
    RankReport report{r, std::nullopt};
    if (reports[r]) {
      try {
        report.position = position_from_json(nlohmann::json::parse(*reports[r]));
      } catch (const std::exception&) {
      }  // a malformed report counts as none
    }
    ranks.push_back(std::move(report));
  }
  const double stalled = mine.oldest_pending ? mine.oldest_pending->age_seconds : 0;
  StallFinding finding =
      analyze_stall(ranks, stalled,
                    "did not report within " + std::to_string(wait.count() / 1000) +
                        " s (stuck outside collectives, or exited)");
  std::fprintf(stderr, "ddpd: rank %d cross-rank analysis: %s\n", comm.info().rank,
               finding.message.c_str());
  std::fflush(stderr);
  finding.message = "cross-rank analysis: " + finding.message;
  return finding;
}

}  // namespace ddpd::detail
