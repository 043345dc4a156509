#include "trace.h"

#include "ddpd/common/intervals.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <stdexcept>

namespace ddpd::client {
namespace {

double earliest_span(const v1::GetJobReply& reply) {
  double t0 = std::numeric_limits<double>::infinity();
  for (const auto& step : reply.steps()) {
    for (const auto& span : step.spans()) t0 = std::min(t0, span.begin_unix_s());
  }
  if (t0 == std::numeric_limits<double>::infinity()) {
    throw std::runtime_error("job " + reply.job().job_id() +
                             " has no step spans to draw (comm jobs report none)");
  }
  return t0;
}

nlohmann::json metadata(const char* what, int pid, int tid, const std::string& name) {
  nlohmann::json event{{"name", what}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", name}}}};
  if (tid >= 0) event["tid"] = tid;
  return event;
}

}  // namespace

nlohmann::json chrome_trace(const v1::GetJobReply& reply) {
  const double t0 = earliest_span(reply);
  auto us = [t0](double unix_s) { return (unix_s - t0) * 1e6; };
  nlohmann::json events = nlohmann::json::array();
  std::map<int, std::vector<double>> lanes_by_rank;  // per rank: each comm lane's last end
  const auto& workers = reply.job().worker_ids();
  for (const auto& step : reply.steps()) {
    const int rank = step.rank();
    auto& lanes = lanes_by_rank[rank];
    if (lanes.empty() && !step.spans().empty()) {
      const std::string worker = rank < workers.size() ? " (" + workers[rank] + ")" : "";
      events.push_back(metadata("process_name", rank, -1, "rank " + std::to_string(rank) + worker));
      events.push_back({{"name", "process_sort_index"},
                        {"ph", "M"},
                        {"pid", rank},
                        {"args", {{"sort_index", rank}}}});
      events.push_back(metadata("thread_name", rank, 0, "step"));
    }
    double begin = std::numeric_limits<double>::infinity(), end = -begin;
    std::vector<const v1::Span*> collectives;
    for (const auto& span : step.spans()) {
      if (span.communication()) {
        collectives.push_back(&span);
        continue;
      }
      begin = std::min(begin, span.begin_unix_s());
      end = std::max(end, span.end_unix_s());
      events.push_back({{"name", span.name()},
                        {"cat", "compute"},
                        {"ph", "X"},
                        {"pid", rank},
                        {"tid", 0},
                        {"ts", us(span.begin_unix_s())},
                        {"dur", us(span.end_unix_s()) - us(span.begin_unix_s())},
                        {"args", {{"step", step.step()}}}});
    }
    if (end > begin) {
      events.push_back({{"name", "step " + std::to_string(step.step())},
                        {"cat", "step"},
                        {"ph", "X"},
                        {"pid", rank},
                        {"tid", 0},
                        {"ts", us(begin)},
                        {"dur", us(end) - us(begin)},
                        {"args",
                         {{"step", step.step()},
                          {"loss", step.loss()},
                          {"comm_fraction", step.comm_fraction()}}}});
    }
    std::sort(collectives.begin(), collectives.end(), [](const v1::Span* a, const v1::Span* b) {
      return a->begin_unix_s() < b->begin_unix_s();
    });
    for (const v1::Span* span : collectives) {
      size_t lane = 0;
      while (lane < lanes.size() && lanes[lane] > span->begin_unix_s()) ++lane;
      if (lane == lanes.size()) {
        lanes.push_back(0);
        events.push_back(metadata("thread_name", rank, static_cast<int>(lane + 1),
                                  "communication " + std::to_string(lane)));
      }
      lanes[lane] = span->end_unix_s();
      events.push_back({{"name", span->name()},
                        {"cat", "communication"},
                        {"ph", "X"},
                        {"pid", rank},
                        {"tid", static_cast<int>(lane + 1)},
                        {"ts", us(span->begin_unix_s())},
                        {"dur", us(span->end_unix_s()) - us(span->begin_unix_s())},
                        {"args", {{"step", step.step()}}}});
    }
  }
  return {{"traceEvents", events},
          {"displayTimeUnit", "ms"},
          {"otherData", {{"job_id", reply.job().job_id()}, {"start_unix_s", t0}}}};
}

std::vector<RankOverlap> overlap_by_rank(const v1::GetJobReply& reply) {
  std::map<int, RankOverlap> by_rank;
  for (const auto& step : reply.steps()) {
    std::vector<Interval> collectives;
    Interval backward{0, 0};
    double begin = std::numeric_limits<double>::infinity(), end = -begin;
    for (const auto& span : step.spans()) {
      const Interval interval{span.begin_unix_s(), span.end_unix_s()};
      if (span.communication()) {
        collectives.push_back(interval);
      } else {
        begin = std::min(begin, interval.begin);
        end = std::max(end, interval.end);
        if (span.name() == "backward") backward = interval;
      }
    }
    if (end <= begin) continue;
    auto& r = by_rank[step.rank()];
    r.rank = step.rank();
    ++r.steps;
    r.backward_seconds += backward.end - backward.begin;
    r.comm_seconds += covered_seconds(collectives, {begin, end});
    r.overlapped_seconds += covered_seconds(collectives, backward);
  }
  std::vector<RankOverlap> out;
  for (auto& [rank, r] : by_rank) out.push_back(r);
  return out;
}

std::string overlap_table(const std::vector<RankOverlap>& ranks) {
  std::string out = "rank  steps  backward ms/step  comm ms/step  comm during backward\n";
  for (const auto& r : ranks) {
    const double n = std::max(1, r.steps);
    char line[160];
    std::snprintf(line, sizeof(line), "%4d  %5d  %16.2f  %12.2f  %8.2f ms (%.0f%%)\n", r.rank,
                  r.steps, r.backward_seconds / n * 1e3, r.comm_seconds / n * 1e3,
                  r.overlapped_seconds / n * 1e3,
                  r.comm_seconds > 0 ? 100.0 * r.overlapped_seconds / r.comm_seconds : 0.0);
    out += line;
  }
  return out;
}

}  // namespace ddpd::client
