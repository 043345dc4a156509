// A process's CPU time and memory from /proc, for the load generator and the fuzzer.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

namespace ddpd::load {

struct ProcessUsage {
  double cpu_seconds = 0;      // utime + stime
  int64_t rss_bytes = 0;       // VmRSS
  int64_t peak_rss_bytes = 0;  // VmHWM
};

inline ProcessUsage usage_of(int pid) {
  ProcessUsage u;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  const std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t after_name = text.rfind(')');
  if (after_name != std::string::npos && after_name + 2 < text.size()) {
    std::istringstream fields(text.substr(after_name + 2));
    const std::vector<std::string> f((std::istream_iterator<std::string>(fields)),
                                     std::istream_iterator<std::string>());
    if (f.size() > 12) u.cpu_seconds = (std::stod(f[11]) + std::stod(f[12])) / sysconf(_SC_CLK_TCK);
  }
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string key, unit;
  int64_t kib = 0;
  while (status >> key) {
    if (key == "VmRSS:" && status >> kib >> unit) u.rss_bytes = kib * 1024;
    if (key == "VmHWM:" && status >> kib >> unit) u.peak_rss_bytes = kib * 1024;
  }
  return u;
}

}  // namespace ddpd::load
