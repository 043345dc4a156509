#include "train/error_line.h"

#include <cctype>

namespace ddpd::detail {
namespace {

// The text after `marker` up to the end of its first non-empty line, trimmed ("" if absent).
std::string first_line_after(const std::string& message, const std::string& marker) {
  size_t at = message.find(marker);
  if (at == std::string::npos) return "";
  at += marker.size();
  while (at < message.size() && std::isspace(static_cast<unsigned char>(message[at]))) ++at;
  const size_t end = message.find('\n', at);
  std::string line = message.substr(at, end == std::string::npos ? std::string::npos : end - at);
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
  return line;
}

}  // namespace

std::string error_line(const std::string& message) {
  std::string line = message.substr(0, message.find('\n'));
  const std::string nccl_cause = first_line_after(message, "Last error:");
  if (!nccl_cause.empty() && line.find(nccl_cause) == std::string::npos) {
    line += " (last error: " + nccl_cause + ")";
  }
  const bool allocation = message.find("can't allocate memory") != std::string::npos ||
                          message.find("tried to allocate") != std::string::npos ||
                          message.find("out of memory") != std::string::npos;
  return allocation ? "out of memory: " + line : line;
}

}  // namespace ddpd::detail
