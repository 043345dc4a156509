#include "ddpd/common/stall_analysis.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace ddpd {
namespace {

int64_t element_bytes(const std::string& dtype) {
  static const std::map<std::string, int64_t> sizes{{"float32", 4}, {"float64", 8}, {"bfloat16", 2},
                                                    {"float16", 2}, {"int64", 8},   {"int32", 4},
                                                    {"uint8", 1},   {"int8", 1}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 4 : it->second;
}

std::string size_text(int64_t bytes) {
  char buf[32];
  if (bytes >= (1 << 20)) {
    std::snprintf(buf, sizeof(buf), "%.1f MB", bytes / 1048576.0);
  } else if (bytes >= 1024) {
    std::snprintf(buf, sizeof(buf), "%.1f KB", bytes / 1024.0);
  } else {
    std::snprintf(buf, sizeof(buf), "%lld B", static_cast<long long>(bytes));
  }
  return buf;
}

std::string seconds_text(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.0f s", seconds);
  return buf;
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) text += (i ? "," : "") + std::to_string(ranks[i]);
  return text;
}

// "in backward of step 17, last completed #1041".
std::string where(const RankReport& r, const std::string& unheard) {
  if (!r.position) return unheard;
  const auto& p = *r.position;
  return "in " + p.phase + " of step " + std::to_string(p.step) + ", last completed #" +
         std::to_string(p.last_completed);
}

bool same_collective(const CollectiveRecord& a, const CollectiveRecord& b) {
  return a.op == b.op && a.numel == b.numel && a.dtype == b.dtype;
}

}  // namespace

std::string collective_signature(const CollectiveRecord& c) {
  return c.op + "(" + std::to_string(c.numel) + " × " + c.dtype + ") [" + c.tag + "]";
}

std::string describe_collective(const CollectiveRecord& c) {
  return c.op + " #" + std::to_string(c.seq) + " (" + c.tag + ", " +
         size_text(c.numel * element_bytes(c.dtype)) + ")";
}

StallFinding analyze_stall(const std::vector<RankReport>& ranks, double stalled_seconds,
                           const std::string& unheard) {
  StallFinding finding;
  finding.kind = IncidentKind::kStall;
  // The collective that blocks: the lowest sequence number any rank waits in.
  const CollectiveRecord* blocking = nullptr;
  for (const auto& r : ranks) {
    if (!r.position || !r.position->oldest_pending.has_value()) continue;
    const auto& pending = *r.position->oldest_pending;
    if (!blocking || pending.seq < blocking->seq) blocking = &pending;
  }
  if (!blocking) {
    // Nobody waits in a collective: every rank is stuck in its own work.
    finding.message = "stall: no rank completed a collective or a step for " +
                      seconds_text(stalled_seconds) + " and none waits in a collective:";
    for (const auto& r : ranks) {
      finding.message += " rank " + std::to_string(r.rank) + " " + where(r, unheard) + ";";
    }
    finding.message.pop_back();
    return finding;
  }
  std::vector<int> waiting, missing;
  const RankReport* first_waiting = nullptr;
  double longest_wait = 0;
  for (const auto& r : ranks) {
    const bool waits = r.position && r.position->oldest_pending.has_value() &&
                       r.position->oldest_pending->seq == blocking->seq;
    if (waits) {
      const auto& mine = *r.position->oldest_pending;
      if (!first_waiting) first_waiting = &r;
      // The same sequence number must be the same collective on every rank.
      const auto& theirs = *first_waiting->position->oldest_pending;
      if (!same_collective(mine, theirs)) {
        finding.kind = IncidentKind::kDesync;
        finding.rank = r.rank;
        finding.message = "desync: rank " + std::to_string(r.rank) + " launched " +
                          collective_signature(mine) + " as #" + std::to_string(mine.seq) +
                          " where rank " + std::to_string(first_waiting->rank) + " launched " +
                          collective_signature(theirs);
        return finding;
      }
      waiting.push_back(r.rank);
      longest_wait = std::max(longest_wait, mine.age_seconds);
    } else if (!r.position || r.position->last_enqueued < blocking->seq) {
      missing.push_back(r.rank);
    }
  }
  finding.message = "stall: " + ranks_text(waiting) + (waiting.size() == 1 ? " waits" : " wait") +
                    " in " + describe_collective(*blocking) + " for " + seconds_text(longest_wait);
  if (missing.empty()) {
    finding.message += "; every rank has launched it (the collective itself does not complete)";
    return finding;
  }
  finding.rank = missing.front();
  for (size_t i = 0; i < missing.size(); ++i) {
    const RankReport& r = *std::find_if(ranks.begin(), ranks.end(),
                                        [&](const RankReport& x) { return x.rank == missing[i]; });
    finding.message += (i ? "; " : "; ") + std::string("rank ") + std::to_string(r.rank) +
                       " has not joined it: " + where(r, unheard);
  }
  return finding;
}

}  // namespace ddpd
