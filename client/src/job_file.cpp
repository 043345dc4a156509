#include "job_file.h"

#include <filesystem>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <type_traits>

#include "ddpd/common/ddp_flags.h"
#include "ddpd/common/job_option_table.h"
#include "ddpd/common/job_options.h"

namespace ddpd::client {
namespace {

using google::protobuf::FieldDescriptor;

OptionError file_error(const std::string& path, const std::string& key, const std::string& why) {
  return OptionError("-f", path + ": key '" + key + "': " + why);
}

// A scalar's text, or a sequence's items joined by ',' (what the list flags take).
std::string value_text(const YAML::Node& value, const std::string& path, const std::string& key) {
  if (value.IsScalar()) return value.Scalar();
  if (value.IsSequence()) {
    std::string joined;
    for (const auto& item : value) {
      if (!item.IsScalar()) throw file_error(path, key, "expected a list of plain values");
      joined += (joined.empty() ? "" : ",") + item.Scalar();
    }
    return joined;
  }
  throw file_error(path, key, value.IsMap() ? "expected a value, got a mapping" : "has no value");
}

CLI::Option* find_option(CLI::App& command, const std::string& key) {
  for (CLI::App* app = &command; app != nullptr; app = app->get_parent()) {
    if (auto* option = app->get_option_no_throw("--" + key)) return option;
  }
  return nullptr;
}

// 1073741824 -> "1GB": sizes as --sizes reads them.
std::string size_text(int64_t bytes) {
  for (const auto& [unit, scale] : {std::pair<const char*, int64_t>{"GB", int64_t{1} << 30},
                                    {"MB", int64_t{1} << 20},
                                    {"KB", int64_t{1} << 10}}) {
    if (bytes % scale == 0) return std::to_string(bytes / scale) + unit;
  }
  return std::to_string(bytes) + "B";
}

// The shortest decimal that reads back as `value` (0.003, not 0.0030000000000000001), without an
// exponent where plain digits are short enough (300, not 3e+02: --timeout 300 reads back as given).
std::string shortest_text(double value) {
  char text[40];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(text, sizeof(text), "%.*g", digits, value);
    if (std::strtod(text, nullptr) == value) break;
  }
  if (std::strchr(text, 'e') == nullptr || !(std::fabs(value) >= 1e-5 && std::fabs(value) < 1e16)) {
    return text;
  }
  for (int decimals = 0; decimals <= 20; ++decimals) {
    std::snprintf(text, sizeof(text), "%.*f", decimals, value);
    if (std::strtod(text, nullptr) == value) break;
  }
  return text;
}

// Every field `message` sets, under the flags of `flags` (the scratch app that declares them).
void emit_fields(YAML::Emitter& out, const google::protobuf::Message& message,
                 const CLI::App& flags) {
  const auto* descriptor = message.GetDescriptor();
  const auto* reflection = message.GetReflection();
  for (const CLI::Option* option : flags.get_options()) {
    const std::string flag = option->get_name(false, true);  // the long name, with dashes
    if (flag.rfind("--", 0) != 0 || flag == "--help") continue;
    const FieldDescriptor* field = descriptor->FindFieldByName(proto_field(flag));
    if (field == nullptr) continue;  // not part of the spec (--watch, -f)
    const std::string key = flag.substr(2);
    if (field->is_repeated()) {
      const int count = reflection->FieldSize(message, field);
      if (count == 0) continue;
      out << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginSeq;
      for (int i = 0; i < count; ++i) {
        if (field->cpp_type() == FieldDescriptor::CPPTYPE_INT64) {
          out << size_text(reflection->GetRepeatedInt64(message, field, i));
        } else {
          out << reflection->GetRepeatedString(message, field, i);
        }
      }
      out << YAML::EndSeq;
      continue;
    }
    if (field->has_presence() && !reflection->HasField(message, field)) continue;
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_BOOL:
        if (!reflection->GetBool(message, field)) continue;  // flags are off unless given
        out << YAML::Key << key << YAML::Value << true;
        break;
      case FieldDescriptor::CPPTYPE_INT32:
        out << YAML::Key << key << YAML::Value << reflection->GetInt32(message, field);
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        out << YAML::Key << key << YAML::Value << reflection->GetInt64(message, field);
        break;
      case FieldDescriptor::CPPTYPE_UINT64:
        out << YAML::Key << key << YAML::Value << reflection->GetUInt64(message, field);
        break;
      case FieldDescriptor::CPPTYPE_DOUBLE:
        out << YAML::Key << key << YAML::Value
            << shortest_text(reflection->GetDouble(message, field));
        break;
      case FieldDescriptor::CPPTYPE_STRING: {
        const std::string value = reflection->GetString(message, field);
        if (value.empty()) continue;
        out << YAML::Key << key << YAML::Value << YAML::DoubleQuoted << value;
        break;
      }
      default:
        continue;
    }
  }
}

// A path as written, or against `base` when relative; --resume's words stay words.
std::string resolved_path(const std::string& flag, const std::string& value,
                          const std::filesystem::path& base) {
  if (value.empty() || (flag == "--resume" && (value == "latest" || value == "auto"))) return value;
  const std::filesystem::path path(value);
  if (path.is_absolute()) return value;
  return (base / path).lexically_normal().string();
}

}  // namespace

bool is_path_flag(const std::string& flag) {
  bool found = false;
  for_each_job_option(
      [&](const auto& option) { found = found || (option.path && flag == option.flag); });
  return found;
}

void make_paths_absolute(DdpJobOptions& options) {
  const std::filesystem::path cwd = std::filesystem::current_path();
  for_each_job_option([&](const auto& option) {
    using Value = std::decay_t<decltype(options.*(option.member))>;
    if constexpr (std::is_same_v<Value, std::string>) {
      if (option.path) {
        std::string& value = options.*(option.member);
        value = resolved_path(option.flag, value, cwd);
      }
    }
  });
}

void apply_job_file(const std::string& path, CLI::App& command) {
  // yaml-cpp reads a directory or an unreadable special file (/proc/self/mem) by throwing
  // std::ios_failure, which used to end ddpctl with an abort.
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    throw OptionError("-f", path + ": is a directory, not a job file");
  }
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw OptionError("-f", path + ": cannot read it");
  } catch (const YAML::Exception& e) {
    throw OptionError("-f", path + ": not YAML or JSON: " + e.what());
  } catch (const std::exception& e) {
    throw OptionError("-f", path + ": cannot read it: " + e.what());
  }
  if (!root.IsMap()) throw OptionError("-f", path + ": expected a mapping of flag names to values");
  // yaml-cpp keeps both of two equal keys and the loop below would apply the first: refuse them
  // (YAML 1.2 requires unique keys). batch_size and batch-size name the same flag.
  std::set<std::string> seen;
  for (const auto& entry : root) {
    std::string key = entry.first.as<std::string>();
    std::replace(key.begin(), key.end(), '_', '-');
    if (!seen.insert(key).second) throw file_error(path, key, "the key is given twice");
    const YAML::Node& value = entry.second;
    if (key == "kind") {
      const std::string kind = value_text(value, path, key);
      if (kind != command.get_name()) {
        throw file_error(
            path, key,
            "the file describes a " + kind + " job, the command runs " + command.get_name());
      }
      continue;
    }
    CLI::Option* option = find_option(command, key);
    if (option == nullptr || key == "help" || key == "file") {
      throw file_error(
          path, key,
          "unknown key (the keys are " + command.get_name() + "'s flags without dashes)");
    }
    if (option->count() > 0) continue;  // given on the command line: the flag wins
    std::string text = value_text(value, path, key);
    if (is_path_flag("--" + key)) {
      text = resolved_path("--" + key, text, std::filesystem::path(path).parent_path());
    }
    try {
      option->add_result(text);
      option->run_callback();
    } catch (const CLI::Error& e) {
      throw file_error(path, key, e.what());
    } catch (const OptionError& e) {
      throw file_error(path, key, e.what());
    }
  }
}

std::string job_file_yaml(const v1::JobSpec& spec) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  CLI::App flags;
  DdpJobOptions ddp;
  CommJob comm;
  const google::protobuf::Message* fields = nullptr;
  if (spec.has_ddp()) {
    out << YAML::Key << "kind" << YAML::Value << "ddp";
    add_ddp_flags(flags, ddp);
    fields = &spec.ddp();
  } else {
    out << YAML::Key << "kind" << YAML::Value << "comm";
    add_comm_job_flags(flags, comm);
    fields = &spec.comm();
  }
  out << YAML::Key << "world-size" << YAML::Value << spec.world_size();
  emit_fields(out, *fields, flags);
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace ddpd::client
