#include "ddpd/common/comm_options.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <stdexcept>

#include "ddpd/common/job_options.h"
#include "enum_names_define.h"

namespace ddpd {
namespace {

constexpr int64_t kMaxBytes = int64_t{8} << 30;

}  // namespace

DDPD_ENUM_NAMES(CommSeries, "all_reduce", "all_gather", "reduce_scatter", "broadcast",
                "all_reduce_back_to_back")

CommSeries series_of(Collective collective) {
  switch (collective) {
    case Collective::kAllReduce:
      return CommSeries::kAllReduce;
    case Collective::kAllGather:
      return CommSeries::kAllGather;
    case Collective::kReduceScatter:
      return CommSeries::kReduceScatter;
    case Collective::kBroadcast:
      return CommSeries::kBroadcast;
  }
  throw std::logic_error("series_of: unknown collective");
}

int64_t parse_size(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.')) {
    ++digits;
  }
  const std::string number = text.substr(0, digits), unit = text.substr(digits);
  double value = 0;
  try {
    size_t used = 0;
    value = std::stod(number, &used);
    if (used != number.size()) throw std::invalid_argument("trailing");
  } catch (const std::exception&) {
    throw OptionError("--sizes", "'" + text + "' is not a size (expected e.g. 1MB, 512KB, 1GB)");
  }
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  if (unit == "KB" || unit == "K") scale = 1 << 10;
  if (unit == "MB" || unit == "M") scale = 1 << 20;
  if (unit == "GB" || unit == "G") scale = 1 << 30;
  if (scale == 0) {
    throw OptionError("--sizes", "unknown unit in '" + text + "' (expected B, KB, MB or GB)");
  }
  const double bytes = value * scale;
  if (bytes < 1 || bytes > static_cast<double>(kMaxBytes)) {
    throw OptionError("--sizes", "'" + text + "' is out of range (1 B to 8 GB)");
  }
  return static_cast<int64_t>(bytes);
}

std::vector<int64_t> parse_sizes(const std::string& list) {
  std::vector<int64_t> sizes;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    sizes.push_back(parse_size(list.substr(start, end - start)));
    start = end + 1;
  }
  return sizes;
}

void validate(const CommBenchOptions& o) {
  require(!o.collectives.empty(), "--collective", "name at least one collective");
  require(!o.sizes_bytes.empty(), "--sizes", "name at least one size");
  for (int64_t s : o.sizes_bytes) {
    require(s >= 4 && s <= kMaxBytes, "--sizes",
            std::to_string(s) + " bytes is out of range (4 B to 8 GB)");
  }
  require(o.warmup >= 0, "--warmup", "must be >= 0");
  require(o.iters >= 1, "--iters", "must be >= 1");
}

double busbw_factor(Collective collective, int n) {
  switch (collective) {
    case Collective::kAllReduce:
      return 2.0 * (n - 1) / n;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
      return (n - 1.0) / n;
    case Collective::kBroadcast:
      return 1.0;
  }
  return 1.0;
}

LatencyBandwidthFit fit_latency_bandwidth(const std::vector<int64_t>& sizes,
                                          const std::vector<double>& times) {
  // Sizes span orders of magnitude, so fit relative residuals: minimise
  // sum(((alpha + S_i * g - t_i) / t_i)^2) with g = 1/beta — linear least squares in (alpha, g)
  // on rows [1/t_i, S_i/t_i] against 1.
  LatencyBandwidthFit fit;
  double a11 = 0, a12 = 0, a22 = 0, b1 = 0, b2 = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const double x1 = 1.0 / times[i], x2 = static_cast<double>(sizes[i]) / times[i];
    a11 += x1 * x1;
    a12 += x1 * x2;
    a22 += x2 * x2;
    b1 += x1;
    b2 += x2;
  }
  const double det = a11 * a22 - a12 * a12;
  double g = 0;
  if (sizes.size() >= 2 && std::abs(det) > 0) {
    fit.alpha_s = (b1 * a22 - b2 * a12) / det;
    g = (a11 * b2 - a12 * b1) / det;
  }
  // A negative overhead or bandwidth term is noise, not physics (small sizes measured slower
  // than large ones): keep alpha >= 0 by fitting the bandwidth term alone, which is always
  // positive for positive times and sizes.
  if (fit.alpha_s < 0 || g <= 0) {
    fit.alpha_s = 0;
    g = a22 > 0 ? b2 / a22 : 0;
  }
  fit.beta_bytes_per_s = g > 0 ? 1.0 / g : 0;
  double squared = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const double predicted = fit.alpha_s + g * static_cast<double>(sizes[i]);
    squared += std::pow((predicted - times[i]) / times[i], 2) / sizes.size();
  }
  fit.rms_relative_error = std::sqrt(squared);
  return fit;
}

double fraction_of(double bytes_per_s, const Ceiling& ceiling) {
  return ceiling.median > 0 ? bytes_per_s / ceiling.median : 0;
}

MemoryCeilings memory_ceilings_at(const CommBenchResult& result, int64_t size_bytes) {
  const auto found = result.memory_by_size.find(size_bytes);
  return found == result.memory_by_size.end() ? MemoryCeilings{} : found->second;
}

double fraction_of_loopback(const CommRow& row, const CommBenchResult& result) {
  return fraction_of(row.busbw_bytes_per_s, result.loopback);
}

double fraction_of_memcpy(const CommRow& row, const CommBenchResult& result) {
  return fraction_of(row.algbw_bytes_per_s, memory_ceilings_at(result, row.size_bytes).memcpy);
}

double fraction_of_in_place(const CommRow& row, const CommBenchResult& result) {
  return fraction_of(row.algbw_bytes_per_s, memory_ceilings_at(result, row.size_bytes).in_place);
}

Ceiling own_ceiling(const CommBenchResult& result, int64_t size_bytes) {
  return result.transport == GroupTransport::kShm ? memory_ceilings_at(result, size_bytes).in_place
                                                  : result.loopback;
}

bool above_own_ceiling(const CommBenchResult& result, const CommRow& row) {
  const Ceiling own = own_ceiling(result, row.size_bytes);
  const double rate =
      result.transport == GroupTransport::kShm ? row.algbw_bytes_per_s : row.busbw_bytes_per_s;
  return own.max > 0 && rate > own.max;
}

}  // namespace ddpd
