#include "ddpd/comm_table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ddpd {

std::string comm_table(const nlohmann::json& result) {
  std::string out;
  char line[256];
  const auto spread = [&](const char* key) {
    const auto& s = result[std::string(key) + "_spread_bytes_per_second"];
    return std::make_pair(s[0].get<double>() / 1e9, s[1].get<double>() / 1e9);
  };
  const auto [lo_min, lo_max] = spread("loopback");
  const auto [mc_min, mc_max] = spread("memcpy");
  const auto [ip_min, ip_max] = spread("in_place");
  std::snprintf(line, sizeof(line),
                "# world size %d, transport %s; ceilings per rank, all ranks at once (median, "
                "spread): loopback TCP %.2f GB/s (%.2f-%.2f); at the largest size memcpy %.2f GB/s "
                "(%.2f-%.2f), in place %.2f GB/s (%.2f-%.2f)\n",
                result["world_size"].get<int>(),
                result.value("transport", std::string("gloo")).c_str(),
                result["loopback_bytes_per_second"].get<double>() / 1e9, lo_min, lo_max,
                result["memcpy_bytes_per_second"].get<double>() / 1e9, mc_min, mc_max,
                result["in_place_bytes_per_second"].get<double>() / 1e9, ip_min, ip_max);
  out += line;
  if (result.contains("transport_note")) {
    out += "# " + result["transport_note"].get<std::string>() + "\n";
  }
  std::snprintf(line, sizeof(line), "%-15s %12s %11s %11s %11s %10s %10s %7s %7s %7s %4s\n",
                "# collective", "size(B)", "time(us)", "min(us)", "max(us)", "algbw GB/s",
                "busbw GB/s", "of lo", "of mc", "of ip", "ok");
  out += line;
  bool above_ceiling = false;
  for (const auto& r : result["rows"]) {
    double lo = INFINITY, hi = 0;
    for (double v : r["rank_min_seconds"]) lo = std::min(lo, v);
    for (double v : r["rank_max_seconds"]) hi = std::max(hi, v);
    const bool above = r.value("above_ceiling", false);
    above_ceiling = above_ceiling || above;
    std::snprintf(line, sizeof(line),
                  "%-15s %12lld %11.1f %11.1f %11.1f %10.3f %10.3f %6.1f%% %6.1f%% %6.1f%% %4s%s\n",
                  r["collective"].get<std::string>().c_str(),
                  static_cast<long long>(r["size_bytes"].get<int64_t>()),
                  r["time_seconds"].get<double>() * 1e6, lo * 1e6, hi * 1e6,
                  r["algbw_bytes_per_second"].get<double>() / 1e9,
                  r["busbw_bytes_per_second"].get<double>() / 1e9,
                  100 * r["fraction_of_loopback"].get<double>(),
                  100 * r.value("fraction_of_memcpy", 0.0),
                  100 * r.value("fraction_of_in_place", 0.0),
                  r["data_ok"].get<bool>() ? "yes" : "NO", above ? "  !" : "");
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
  if (above_ceiling) {
    out +=
        "# ! busbw above the transport's ceiling (its best trial): the ceiling was mismeasured "
        "(too few bytes, no warm-up, or other load during it)\n";
  }
  return out;
}

std::string comm_sweep_table(const std::vector<nlohmann::json>& results) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof(line), "%-6s %-9s %-15s %12s %11s %10s %10s %7s %7s\n", "# world",
                "transport", "collective", "size(B)", "time(us)", "algbw GB/s", "busbw GB/s",
                "of lo", "of mc");
  out += line;
  for (const auto& result : results) {
    for (const auto& r : result["rows"]) {
      std::snprintf(
          line, sizeof(line), "%-7d %-9s %-15s %12lld %11.1f %10.3f %10.3f %6.1f%% %6.1f%%\n",
          result["world_size"].get<int>(), result.value("transport", std::string("gloo")).c_str(),
          r["collective"].get<std::string>().c_str(),
          static_cast<long long>(r["size_bytes"].get<int64_t>()),
          r["time_seconds"].get<double>() * 1e6, r["algbw_bytes_per_second"].get<double>() / 1e9,
          r["busbw_bytes_per_second"].get<double>() / 1e9,
          100 * r["fraction_of_loopback"].get<double>(), 100 * r.value("fraction_of_memcpy", 0.0));
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
