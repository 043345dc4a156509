#include "ddpd/common/comm_table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ddpd {
namespace {

constexpr double kGB = 1e9;
constexpr double kMicroseconds = 1e6;

// The largest size's memory ceilings (DRAM-bound) stand for the host.
MemoryCeilings host_memory(const CommBenchResult& result) {
  return result.memory_by_size.empty() ? MemoryCeilings{} : result.memory_by_size.rbegin()->second;
}

std::string header(const CommBenchResult& result) {
  char line[320];
  const MemoryCeilings memory = host_memory(result);
  const Ceiling& lo = result.loopback;
  std::snprintf(line, sizeof(line),
                "# world size %d, transport %s; ceilings per rank, all ranks at once (median, "
                "spread): loopback TCP %.2f GB/s (%.2f-%.2f); at the largest size memcpy %.2f GB/s "
                "(%.2f-%.2f), in place %.2f GB/s (%.2f-%.2f)\n",
                result.world_size, enum_name(result.transport).c_str(), lo.median / kGB,
                lo.min / kGB, lo.max / kGB, memory.memcpy.median / kGB, memory.memcpy.min / kGB,
                memory.memcpy.max / kGB, memory.in_place.median / kGB, memory.in_place.min / kGB,
                memory.in_place.max / kGB);
  std::string out = line;
  if (!result.transport_note.empty()) out += "# " + result.transport_note + "\n";
  if (result.shared_buffers_fallback)
    out += "# " + describe(*result.shared_buffers_fallback) + "\n";
  return out;
}

std::string row_line(const CommBenchResult& result, const CommRow& r) {
  double lo = INFINITY, hi = 0;
  for (double v : r.rank_min_s) lo = std::min(lo, v);
  for (double v : r.rank_max_s) hi = std::max(hi, v);
  char line[256];
  std::snprintf(line, sizeof(line),
                "%-15s %12lld %11.1f %11.1f %11.1f %10.3f %10.3f %6.1f%% %6.1f%% %6.1f%% %4s%s\n",
                enum_name(r.collective).c_str(), static_cast<long long>(r.size_bytes),
                r.time_s * kMicroseconds, lo * kMicroseconds, hi * kMicroseconds,
                r.algbw_bytes_per_s / kGB, r.busbw_bytes_per_s / kGB,
                100 * fraction_of_loopback(r, result), 100 * fraction_of_memcpy(r, result),
                100 * fraction_of_in_place(r, result), r.data_ok ? "yes" : "NO",
                above_own_ceiling(result, r) ? "  !" : "");
  return line;
}

}  // namespace

std::string comm_table(const CommBenchResult& result) {
  std::string out = header(result);
  char line[256];
  std::snprintf(line, sizeof(line), "%-15s %12s %11s %11s %11s %10s %10s %7s %7s %7s %4s\n",
                "# collective", "size(B)", "time(us)", "min(us)", "max(us)", "algbw GB/s",
                "busbw GB/s", "of lo", "of mc", "of ip", "ok");
  out += line;
  bool above_ceiling = false;
  for (const auto& r : result.rows) {
    above_ceiling = above_ceiling || above_own_ceiling(result, r);
    out += row_line(result, r);
  }
  for (const auto& f : result.fits) {
    std::snprintf(line, sizeof(line),
                  "# fit %s: t(S) = %.1f us + S / %.3f GB/s  (rms relative error %.1f%%)\n",
                  enum_name(f.collective).c_str(), f.alpha_s * kMicroseconds,
                  f.beta_bytes_per_s / kGB, 100 * f.rms_relative_error);
    out += line;
  }
  if (above_ceiling) {
    out +=
        "# ! above the transport's ceiling (its best trial; busbw against loopback, algbw "
        "against in place): the ceiling was mismeasured "
        "(too few bytes, no warm-up, or other load during it)\n";
  }
  return out;
}

std::string comm_sweep_table(const std::vector<CommBenchResult>& results) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof(line), "%-6s %-9s %-15s %12s %11s %10s %10s %7s %7s\n", "# world",
                "transport", "collective", "size(B)", "time(us)", "algbw GB/s", "busbw GB/s",
                "of lo", "of mc");
  out += line;
  for (const auto& result : results) {
    for (const auto& r : result.rows) {
      std::snprintf(line, sizeof(line),
                    "%-7d %-9s %-15s %12lld %11.1f %10.3f %10.3f %6.1f%% %6.1f%%\n",
                    result.world_size, enum_name(result.transport).c_str(),
                    enum_name(r.collective).c_str(), static_cast<long long>(r.size_bytes),
                    r.time_s * kMicroseconds, r.algbw_bytes_per_s / kGB, r.busbw_bytes_per_s / kGB,
                    100 * fraction_of_loopback(r, result), 100 * fraction_of_memcpy(r, result));
      out += line;
    }
  }
  for (const auto& result : results) {
    for (const auto& f : result.fits) {
      std::snprintf(line, sizeof(line),
                    "# world %d fit %s: alpha %.1f us, beta %.3f GB/s (rms %.1f%%)\n",
                    result.world_size, enum_name(f.collective).c_str(), f.alpha_s * kMicroseconds,
                    f.beta_bytes_per_s / kGB, 100 * f.rms_relative_error);
      out += line;
    }
  }
  return out;
}

}  // namespace ddpd
