#include "ddpd/comm_table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ddpd {

std::string comm_table(const nlohmann::json& result) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof(line), "# world size %d, loopback TCP %.2f GB/s each way\n",
                result["world_size"].get<int>(),
                result["loopback_bytes_per_second"].get<double>() / 1e9);
  out += line;
  std::snprintf(line, sizeof(line), "%-15s %12s %11s %11s %11s %10s %10s %9s %4s\n", "# collective",
                "size(B)", "time(us)", "min(us)", "max(us)", "algbw GB/s", "busbw GB/s", "of lo",
                "ok");
  out += line;
  for (const auto& r : result["rows"]) {
    double lo = INFINITY, hi = 0;
    for (double v : r["rank_min_seconds"]) lo = std::min(lo, v);
    for (double v : r["rank_max_seconds"]) hi = std::max(hi, v);
    std::snprintf(
        line, sizeof(line), "%-15s %12lld %11.1f %11.1f %11.1f %10.3f %10.3f %8.1f%% %4s\n",
        r["collective"].get<std::string>().c_str(),
        static_cast<long long>(r["size_bytes"].get<int64_t>()),
        r["time_seconds"].get<double>() * 1e6, lo * 1e6, hi * 1e6,
        r["algbw_bytes_per_second"].get<double>() / 1e9,
        r["busbw_bytes_per_second"].get<double>() / 1e9,
        100 * r["fraction_of_loopback"].get<double>(), r["data_ok"].get<bool>() ? "yes" : "NO");
    out += line;
  }
  for (const auto& f : result["fits"]) {
    std::snprintf(line, sizeof(line),
                  "# fit %s: t(S) = %.1f us + S / %.3f GB/s  (rms relative error %.1f%%)\n",
                  f["collective"].get<std::string>().c_str(),
                  f["alpha_seconds"].get<double>() * 1e6,
                  f["beta_bytes_per_second"].get<double>() / 1e9,
                  100 * f["rms_relative_error"].get<double>());
    out += line;
  }
  return out;
}

std::string comm_sweep_table(const std::vector<nlohmann::json>& results) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof(line), "%-6s %-15s %12s %11s %10s %10s %9s\n", "# world", "collective",
                "size(B)", "time(us)", "algbw GB/s", "busbw GB/s", "of lo");
  out += line;
  for (const auto& result : results) {
    for (const auto& r : result["rows"]) {
      std::snprintf(line, sizeof(line), "%-7d %-15s %12lld %11.1f %10.3f %10.3f %8.1f%%\n",
                    result["world_size"].get<int>(), r["collective"].get<std::string>().c_str(),
                    static_cast<long long>(r["size_bytes"].get<int64_t>()),
                    r["time_seconds"].get<double>() * 1e6,
                    r["algbw_bytes_per_second"].get<double>() / 1e9,
                    r["busbw_bytes_per_second"].get<double>() / 1e9,
                    100 * r["fraction_of_loopback"].get<double>());
      out += line;
    }
  }
  for (const auto& result : results) {
    for (const auto& f : result["fits"]) {
      std::snprintf(
          line, sizeof(line), "# world %d fit %s: alpha %.1f us, beta %.3f GB/s (rms %.1f%%)\n",
          result["world_size"].get<int>(), f["collective"].get<std::string>().c_str(),
          f["alpha_seconds"].get<double>() * 1e6, f["beta_bytes_per_second"].get<double>() / 1e9,
          100 * f["rms_relative_error"].get<double>());
      out += line;
    }
  }
  return out;
}

}  // namespace ddpd
