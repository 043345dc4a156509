#include "ddpd/common/fault_injection.h"

#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>

#include "ddpd/common/job_options.h"
#include "enum_names_define.h"

namespace ddpd {

DDPD_ENUM_NAMES(FaultKind, "hang", "exit", "slow", "skip-collective", "crash-during-checkpoint",
                "exit-during-heal", "exit-after-update")

namespace {

constexpr const char* kFlag = "--inject";
constexpr const char* kForm = " (expected KIND:rank=R,step=S[,seconds=T][,factor=F])";

double number(const std::string& key, const std::string& value) {
  char* end = nullptr;
  const double parsed = std::strtod(value.c_str(), &end);
  require(!value.empty() && end && *end == '\0', kFlag,
          key + " is not a number: '" + value + "'" + kForm);
  return parsed;
}

}  // namespace

std::optional<FaultInjection> parse_fault_injection(const std::string& text, int world_size) {
  if (text.empty()) return std::nullopt;
  const auto colon = text.find(':');
  FaultInjection fault;
  fault.kind = parse_enum<FaultKind>(text.substr(0, colon));  // OptionError(--inject) naming them
  require(colon != std::string::npos, kFlag, "'" + text + "' has no parameters" + kForm);
  bool has_rank = false, has_step = false;
  std::set<std::string> seen;  // a repeated key is refused: which one was meant is a guess
  std::stringstream parts(text.substr(colon + 1));
  std::string part;
  while (std::getline(parts, part, ',')) {
    const auto eq = part.find('=');
    require(eq != std::string::npos, kFlag, "'" + part + "' is not key=value" + kForm);
    const std::string key = part.substr(0, eq), value = part.substr(eq + 1);
    require(seen.insert(key).second, kFlag, "'" + key + "' is given twice in '" + text + "'");
    const double v = number(key, value);
    if (key == "rank") {
      require(v >= 0 && v == static_cast<int>(v), kFlag, "rank must be an integer >= 0");
      fault.rank = static_cast<int>(v);
      has_rank = true;
    } else if (key == "step") {
      require(v >= 0 && v == static_cast<int64_t>(v), kFlag, "step must be an integer >= 0");
      fault.step = static_cast<int64_t>(v);
      has_step = true;
    } else if (key == "seconds") {
      require(v >= 0, kFlag, "seconds must be >= 0");
      fault.seconds = v;
    } else if (key == "factor") {
      require(v > 1, kFlag, "factor must be > 1");
      fault.factor = v;
    } else {
      require(false, kFlag, "unknown key '" + key + "'" + kForm);
    }
  }
  require(has_rank && has_step, kFlag, "rank= and step= are required" + std::string(kForm));
  require(fault.kind == FaultKind::kSlow || fault.factor == 1.0, kFlag,
          "factor applies to slow only");
  require(fault.kind == FaultKind::kHang || fault.seconds == 0, kFlag,
          "seconds applies to hang only");
  require(fault.kind != FaultKind::kSlow || fault.factor > 1, kFlag, "slow needs factor=F (> 1)");
  require(world_size <= 0 || fault.rank < world_size, kFlag,
          "rank " + std::to_string(fault.rank) + " is outside a world of " +
              std::to_string(world_size));
  return fault;
}

std::string to_string(const FaultInjection& fault) {
  std::string text = enum_name(fault.kind) + ":rank=" + std::to_string(fault.rank) +
                     ",step=" + std::to_string(fault.step);
  char buf[64];
  if (fault.seconds > 0) {
    std::snprintf(buf, sizeof(buf), ",seconds=%g", fault.seconds);
    text += buf;
  }
  if (fault.kind == FaultKind::kSlow) {
    std::snprintf(buf, sizeof(buf), ",factor=%g", fault.factor);
    text += buf;
  }
  return text;
}

}  // namespace ddpd
