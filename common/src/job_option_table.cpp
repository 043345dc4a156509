// The table's ranges, the shard size's units and the options table of docs/job-files.md.
#include "ddpd/common/job_option_table.h"

#include <charconv>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <type_traits>
#include <utility>
#include <vector>

namespace ddpd {
namespace {

// A bound or a value as a user writes it: 256, 0.5, 2592000, 1e-08.
std::string number_text(double value) {
  if (std::isfinite(value) && value == std::floor(value) && std::fabs(value) < 1e15) {
    return std::to_string(static_cast<int64_t>(value));
  }
  char text[32];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(text, sizeof(text), "%.*g", digits, value);
    if (std::strtod(text, nullptr) == value) break;
  }
  return text;
}

template <typename T>
constexpr bool kIsNumber = std::is_arithmetic_v<T> && !std::is_same_v<T, bool>;

}  // namespace

std::string OptionRange::text() const {
  const bool has_lo = std::isfinite(lo);
  const bool has_hi = std::isfinite(hi);
  if (has_lo && has_hi) {
    if (!lo_open && !hi_open) return number_text(lo) + ".." + number_text(hi);
    return std::string(lo_open ? "(" : "[") + number_text(lo) + ", " + number_text(hi) +
           (hi_open ? ")" : "]");
  }
  if (has_lo) return std::string(lo_open ? "> " : ">= ") + number_text(lo);
  if (has_hi) return std::string(hi_open ? "< " : "<= ") + number_text(hi);
  return "";
}

void check_ranges(const DdpJobOptions& options) {
  for_each_job_option([&options](const auto& entry) {
    using T = std::decay_t<decltype(options.*(entry.member))>;
    if constexpr (kIsNumber<T>) {
      if (!entry.range.bounded()) return;
      const double value = static_cast<double>(options.*(entry.member));
      if (std::isfinite(value) && entry.range.contains(value)) return;
      const bool interval = std::isfinite(entry.range.lo) && std::isfinite(entry.range.hi);
      std::string reason = std::string("must be ") + (interval ? "in " : "") + entry.range.text();
      if (entry.range.note != nullptr) reason += std::string(" (") + entry.range.note + ")";
      throw OptionError(entry.flag, reason + ", got " + number_text(value));
    }
  });
}

int64_t parse_shard_size(const std::string& text) {
  static const std::vector<std::pair<std::string, int64_t>> units = {
      {"GB", 1000000000}, {"MB", 1000000}, {"KB", 1000}, {"B", 1}};
  int64_t scale = 1;
  std::string digits = text;
  for (const auto& [suffix, factor] : units) {
    if (text.size() > suffix.size() &&
        text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0) {
      digits = text.substr(0, text.size() - suffix.size());
      scale = factor;
      break;
    }
  }
  int64_t value = 0;
  const char* end = digits.data() + digits.size();
  const auto [ptr, ec] = std::from_chars(digits.data(), end, value);
  require(ec == std::errc() && ptr == end && value > 0 && value <= INT64_MAX / scale,
          "--max-shard-size",
          "must be a size such as 5GB, 500MB or 1000000 (bytes), got '" + text + "'");
  return value * scale;
}

std::string shard_size_text(int64_t bytes) {
  for (const auto& [unit, scale] :
       {std::pair<const char*, int64_t>{"GB", 1000000000}, {"MB", 1000000}, {"KB", 1000}}) {
    if (bytes % scale == 0) return std::to_string(bytes / scale) + unit;
  }
  return std::to_string(bytes);
}

}  // namespace ddpd
