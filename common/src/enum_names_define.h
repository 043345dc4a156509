// What a .cpp file that lists an enum's names includes (enum_names.h): parse_enum's definition,
// and DDPD_ENUM_NAMES, which defines EnumInfo<Enum>::names() and instantiates parse_enum<Enum>.
#pragma once

#include <algorithm>

#include "ddpd/common/enum_names.h"
#include "ddpd/common/job_options.h"  // require, OptionError

namespace ddpd {

template <typename E>
E parse_enum(const std::string& name) {
  const auto& names = EnumInfo<E>::names();
  const auto it = std::find(names.begin(), names.end(), name);
  require(it != names.end(), EnumInfo<E>::kFlag,
          "must be " + choices_text(names) + ", got '" + name + "'");
  return static_cast<E>(it - names.begin());
}

}  // namespace ddpd

// Names in the enum's order; use it in namespace ddpd.
#define DDPD_ENUM_NAMES(Enum, ...)                               \
  const std::vector<std::string>& EnumInfo<Enum>::names() {      \
    static const std::vector<std::string> names = {__VA_ARGS__}; \
    return names;                                                \
  }                                                              \
  template Enum parse_enum<Enum>(const std::string& name);
