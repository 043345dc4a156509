#include "ddpd/service/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cctype>
#include <cstdio>
#include <memory>

#include "ddpd/common/job_options.h"

namespace ddpd {
namespace {

void append_json_string(std::string_view text, spdlog::memory_buf_t& out) {
  out.push_back('"');
  for (const char c : text) {
    switch (c) {
      case '"':
        out.append(std::string_view("\\\""));
        break;
      case '\\':
        out.append(std::string_view("\\\\"));
        break;
      case '\n':
        out.append(std::string_view("\\n"));
        break;
      case '\r':
        out.append(std::string_view("\\r"));
        break;
      case '\t':
        out.append(std::string_view("\\t"));
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof(escaped), "\\u%04x", c);
          out.append(std::string_view(escaped));
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

bool is_integer(std::string_view s) {
  if (s.empty()) return false;
  for (size_t i = s[0] == '-' ? 1 : 0; i < s.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
  }
  return s != "-";
}

// `%*`: the message as JSON fields. Leading `key=value` tokens become fields (integers stay
// numbers); the rest is "msg".
class JsonMessageFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& message, const std::tm&,
              spdlog::memory_buf_t& out) override {
    std::string_view rest(message.payload.data(), message.payload.size());
    while (!rest.empty()) {
      const size_t space = rest.find(' ');
      const std::string_view token = rest.substr(0, space);
      const size_t eq = token.find('=');
      if (eq == std::string_view::npos || eq == 0) break;
      bool key_ok = true;
      for (size_t i = 0; i < eq; ++i) {
        key_ok = key_ok && (std::islower(static_cast<unsigned char>(token[i])) || token[i] == '_');
      }
      if (!key_ok) break;
      append_json_string(token.substr(0, eq), out);
      out.push_back(':');
      const std::string_view value = token.substr(eq + 1);
      if (is_integer(value)) {
        out.append(value);
      } else {
        append_json_string(value, out);
      }
      out.push_back(',');
      rest = space == std::string_view::npos ? std::string_view() : rest.substr(space + 1);
    }
    if (!rest.empty() && rest[0] == ':') rest.remove_prefix(1);
    while (!rest.empty() && rest[0] == ' ') rest.remove_prefix(1);
    append_json_string("msg", out);
    out.push_back(':');
    append_json_string(rest, out);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessageFlag>();
  }
};

}  // namespace

void add_log_flags(CLI::App& app, LogOptions& options) {
  app.add_option("--log-level", options.level, "trace, debug, info, warn, error, off")
      ->capture_default_str();
  app.add_option("--log-format", options.format, "text, or json (one object per line)")
      ->capture_default_str();
}

void configure_logging(const LogOptions& options) {
  const auto level = spdlog::level::from_str(options.level);
  // from_str maps anything unknown to "off"; only the word "off" may mean that.
  if (level == spdlog::level::off && options.level != "off") {
    throw OptionError("--log-level", "unknown level '" + options.level +
                                         "' (trace, debug, info, warn, error, critical, off)");
  }
  // Logs go to stderr, keeping stdout for results (`ddpd-worker run --json`).
  spdlog::set_default_logger(spdlog::stderr_logger_mt("ddpd"));
  spdlog::set_level(level);
  if (options.format == "text") {
    spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
  } else if (options.format == "json") {
    auto formatter = std::make_unique<spdlog::pattern_formatter>();
    formatter->add_flag<JsonMessageFlag>('*').set_pattern(
        R"({"time":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l",%*})");
    spdlog::set_formatter(std::move(formatter));
  } else {
    throw OptionError("--log-format", "unknown format '" + options.format + "' (text, json)");
  }
}

}  // namespace ddpd
