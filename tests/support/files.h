// A file's bytes, for the tests that compare what runs wrote.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

namespace ddpd::testing {

// The whole file at `path`, byte for byte; empty when it cannot be read.
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace ddpd::testing
