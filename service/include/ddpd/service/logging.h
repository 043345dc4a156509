// The one logging set-up for ddpd-coordinator, ddpd-worker and ddpctl (spdlog's default logger).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace ddpd {

struct LogOptions {
  std::string level = "info";   // trace | debug | info | warn | error | critical | off
  std::string format = "text";  // text: one human line per event; json: one JSON object per line
};

// Validates `options` and makes spdlog's default logger write to stderr with them. Throws
// OptionError naming --log-level or --log-format for an unknown value. Call once, from main, before
// threads start logging.
//
// Convention for event lines: the message starts with the fields that locate the event, as
// `job=<id> rank=<r> step=<k>`, then free text. The JSON format lifts those leading key=value
// fields into JSON fields ({"time", "level", "job", "rank", "step", "msg"}), so collectors can
// filter on them without parsing text.
void configure_logging(const LogOptions& options);

// --log-level and --log-format on `app`, defaulting to what `options` holds.
void add_log_flags(CLI::App& app, LogOptions& options);

}  // namespace ddpd
