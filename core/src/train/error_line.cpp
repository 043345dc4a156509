#include "train/error_line.h"

#include <cctype>

namespace ddpd::detail {
namespace {

constexpr const char* kCpuAllocatorFailure = "DefaultCPUAllocator: can't allocate memory";
constexpr const char* kNcclCauseMarker = "Last error:";

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

bool allocation_failed(const c10::Error& error) {
  return dynamic_cast<const c10::OutOfMemoryError*>(&error) != nullptr ||
         error.msg().find(kCpuAllocatorFailure) != std::string::npos;
}

std::string error_line(const c10::Error& error) {
  const std::string& message = error.msg();  // without the backtrace
  std::string line = message.substr(0, message.find('\n'));
  const std::string nccl_cause = first_line_after(message, kNcclCauseMarker);
  if (!nccl_cause.empty() && line.find(nccl_cause) == std::string::npos) {
    line += " (last error: " + nccl_cause + ")";
  }
  return allocation_failed(error) ? "out of memory: " + line : line;
}

}  // namespace ddpd::detail
