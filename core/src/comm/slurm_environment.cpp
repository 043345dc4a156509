#include "comm/slurm_environment.h"

#include <cctype>
#include <stdexcept>

namespace ddpd {

std::string first_host_of_nodelist(const std::string& nodelist) {
  if (nodelist.empty()) throw std::invalid_argument("SLURM_STEP_NODELIST: empty");
  // Hosts are separated by commas outside brackets; inside a bracket the first element of the
  // first range is the first host, and text after the bracket (another bracket, a suffix) goes on.
  std::string host;
  for (size_t i = 0; i < nodelist.size() && nodelist[i] != ',';) {
    if (nodelist[i] != '[') {
      host += nodelist[i++];
      continue;
    }
    size_t close = nodelist.find(']', i);
    if (close == std::string::npos) {
      throw std::invalid_argument("SLURM_STEP_NODELIST: unclosed '[' in '" + nodelist + "'");
    }
    size_t end = nodelist.find_first_of(",-]", i + 1);
    host += nodelist.substr(i + 1, end - i - 1);
    i = close + 1;
  }
  if (host.empty())
    throw std::invalid_argument("SLURM_STEP_NODELIST: no host in '" + nodelist + "'");
  return host;
}

std::vector<int> tasks_per_node(const std::string& compressed) {
  auto malformed = [&] {
    return std::invalid_argument(
        "SLURM_STEP_TASKS_PER_NODE: expected a list like '2(x3),1', got '" + compressed + "'");
  };
  std::vector<int> counts;
  size_t i = 0;
  auto number = [&] {
    if (i >= compressed.size() || !std::isdigit(static_cast<unsigned char>(compressed[i]))) {
      throw malformed();
    }
    long value = 0;
    while (i < compressed.size() && std::isdigit(static_cast<unsigned char>(compressed[i]))) {
      value = value * 10 + (compressed[i++] - '0');
      if (value > 1 << 20) throw malformed();
    }
    return static_cast<int>(value);
  };
  while (true) {
    int tasks = number();
    int repeat = 1;
    if (compressed.compare(i, 2, "(x") == 0) {
      i += 2;
      repeat = number();
      if (i >= compressed.size() || compressed[i++] != ')') throw malformed();
    }
    counts.insert(counts.end(), repeat, tasks);
    if (i == compressed.size()) return counts;
    if (compressed[i++] != ',') throw malformed();
  }
}

}  // namespace ddpd
