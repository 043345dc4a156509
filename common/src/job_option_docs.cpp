// docs/job-files.md's options table, written from the one table (job_option_table.h).
#include <sstream>
#include <type_traits>

#include "ddpd/common/job_option_table.h"

namespace ddpd {
namespace {

std::string cell(std::string text) {
  std::string escaped;
  for (char c : text) escaped += c == '|' ? std::string("\\|") : std::string(1, c);
  return escaped;
}

std::string number_cell(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// The value's type as a user writes it, and the default as a job file would give it.
template <typename T>
std::pair<std::string, std::string> type_and_default(const JobOption<T>& entry) {
  const DdpJobOptions defaults;
  const T& value = defaults.*(entry.member);
  if constexpr (std::is_same_v<T, bool>) {
    return {value ? "true or false" : "flag", value ? "true" : "false"};
  } else if constexpr (std::is_same_v<T, std::string>) {
    return {"text", value.empty() ? "" : "`" + value + "`"};
  } else if constexpr (std::is_same_v<T, std::optional<int64_t>>) {
    return {"integer", "the preset's"};
  } else if constexpr (HasEnumNames<T>::value) {
    return {choices_text(EnumInfo<T>::names()), "`" + enum_name(value) + "`"};
  } else if constexpr (std::is_integral_v<T>) {
    if (entry.format != nullptr) return {"size (5GB, 500MB, bytes)", entry.format(value)};
    return {"integer", std::to_string(value)};
  } else {
    return {"number", number_cell(value)};
  }
}

}  // namespace

std::string job_options_markdown() {
  std::ostringstream out;
  out << "| key | type | default | range | API field | what it does |\n";
  out << "| --- | --- | --- | --- | --- | --- |\n";
  for_each_job_option([&out](const auto& entry) {
    const auto [type, default_text] = type_and_default(entry);
    std::string range = entry.range.text();
    if (!range.empty() && entry.range.note != nullptr)
      range += " (" + std::string(entry.range.note) + ")";
    out << "| `" << (entry.flag + 2) << "` | " << cell(type) << " | " << default_text << " | "
        << cell(range) << " | `" << entry.proto_field << "` | " << cell(entry.help) << " |\n";
  });
  return out.str();
}

}  // namespace ddpd
