// Names for the project's enums. Each enum is parsed from its name once, at the boundary (flags,
// job files, the API, result files), and named back the same way; nothing downstream compares
// names. The header that declares an enum declares its EnumInfo (DDPD_ENUM_INFO) beside it; one
// .cpp file lists its names (DDPD_ENUM_NAMES, common/src/enum_names_define.h).
#pragma once

#include <string>
#include <type_traits>
#include <vector>

namespace ddpd {

// EnumInfo<E>::kFlag: the flag or field a bad name is reported against; names(): the names in
// the enum's order.
template <typename E>
struct EnumInfo;

// Whether T is an enum with names (DDPD_ENUM_INFO): what code generic over option types asks.
template <typename T, typename = void>
struct HasEnumNames : std::false_type {};
template <typename T>
struct HasEnumNames<T, std::void_t<decltype(EnumInfo<T>::kFlag)>> : std::true_type {};

// "a, b or c".
std::string choices_text(const std::vector<std::string>& names);

// Throws OptionError(EnumInfo<E>::kFlag, "must be a, b or c, got 'x'").
template <typename E>
E parse_enum(const std::string& name);

template <typename E>
const std::string& enum_name(E value) {
  return EnumInfo<E>::names().at(static_cast<size_t>(value));
}

}  // namespace ddpd

// Declares EnumInfo<Enum>, reported against `flag`; use it in namespace ddpd, after the enum.
#define DDPD_ENUM_INFO(Enum, flag)                  \
  template <>                                       \
  struct EnumInfo<Enum> {                           \
    static constexpr const char* kFlag = flag;      \
    static const std::vector<std::string>& names(); \
  }
