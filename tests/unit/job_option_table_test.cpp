// The job options' one table (ddpd/common/job_option_table.h) against everything it feeds: the
// API's DdpSpec (every field named once, of the option's type), the CLI (exactly the table's
// flags, in its order), each option's range (a value just outside it is refused naming the
// flag) and docs/job-files.md (the options table as job_options_markdown() writes it).
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>
#include <type_traits>

#include "ddpd/common/ddp_flags.h"
#include "ddpd/common/job_option_table.h"
#include "ddpd/v1/ddpd.pb.h"

namespace ddpd {
namespace {

using google::protobuf::FieldDescriptor;

template <typename T>
FieldDescriptor::CppType cpp_type_of() {
  if constexpr (std::is_same_v<T, bool>) return FieldDescriptor::CPPTYPE_BOOL;
  if constexpr (std::is_same_v<T, int>) return FieldDescriptor::CPPTYPE_INT32;
  if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, std::optional<int64_t>>) {
    return FieldDescriptor::CPPTYPE_INT64;
  }
  if constexpr (std::is_same_v<T, uint64_t>) return FieldDescriptor::CPPTYPE_UINT64;
  if constexpr (std::is_same_v<T, double>) return FieldDescriptor::CPPTYPE_DOUBLE;
  return FieldDescriptor::CPPTYPE_STRING;  // text and enums (by name)
}

TEST(JobOptionTable, NamesEveryDdpSpecFieldOnceWithItsType) {
  const auto* descriptor = v1::DdpSpec::descriptor();
  std::map<std::string, int> named;
  for_each_job_option([&](const auto& entry) {
    using T = std::decay_t<decltype(DdpJobOptions{}.*(entry.member))>;
    ++named[entry.proto_field];
    const FieldDescriptor* field = descriptor->FindFieldByName(entry.proto_field);
    ASSERT_NE(field, nullptr) << entry.flag << ": DdpSpec has no field " << entry.proto_field;
    EXPECT_EQ(field->cpp_type(), cpp_type_of<T>()) << entry.flag;
    EXPECT_FALSE(field->is_repeated()) << entry.flag;
  });
  for (int i = 0; i < descriptor->field_count(); ++i) {
    EXPECT_EQ(named[descriptor->field(i)->name()], 1)
        << "DdpSpec." << descriptor->field(i)->name() << " is not named by exactly one option";
  }
  EXPECT_EQ(named.size(), static_cast<size_t>(descriptor->field_count()));
}

TEST(JobOptionTable, TheCliDeclaresExactlyTheTablesFlagsInItsOrder) {
  CLI::App app;
  DdpJobOptions options;
  add_ddp_flags(app, options);
  std::vector<std::string> declared;
  for (const CLI::Option* option : app.get_options()) {
    if (option->get_name() != "--help") declared.push_back(option->get_name());
  }
  std::vector<std::string> table;
  for_each_job_option([&](const auto& entry) { table.push_back(entry.flag); });
  EXPECT_EQ(declared, table);
}

TEST(JobOptionTable, AnEnumsErrorsNameItsOwnFlag) {
  for_each_job_option([](const auto& entry) {
    using T = std::decay_t<decltype(DdpJobOptions{}.*(entry.member))>;
    if constexpr (HasEnumNames<T>::value) {
      EXPECT_STREQ(EnumInfo<T>::kFlag, entry.flag);
    }
  });
}

// Just outside each bound (an integer one past it, a number the bound itself when the end is
// open or a tenth past it when closed): validate() names the flag; on the bound it accepts.
TEST(JobOptionTable, AValueJustOutsideARangeIsRefusedNamingTheFlag) {
  int checked = 0;
  for_each_job_option([&](const auto& entry) {
    using T = std::decay_t<decltype(DdpJobOptions{}.*(entry.member))>;
    if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
      const OptionRange& r = entry.range;
      const double step = std::is_integral_v<T> ? 1.0 : 0.1;
      for (const auto& [bound, open, outward] :
           {std::tuple{r.lo, r.lo_open, -step}, std::tuple{r.hi, r.hi_open, step}}) {
        if (!std::isfinite(bound)) continue;
        DdpJobOptions options;
        options.*(entry.member) = static_cast<T>(open ? bound : bound + outward);
        try {
          check_ranges(options);
          ADD_FAILURE() << entry.flag << " accepted " << options.*(entry.member);
        } catch (const OptionError& e) {
          EXPECT_EQ(e.flag(), entry.flag) << e.what();
          EXPECT_NE(std::string(e.what()).find("must be"), std::string::npos) << e.what();
        }
        ++checked;
      }
    }
  });
  EXPECT_GT(checked, 25);
  EXPECT_NO_THROW(check_ranges(DdpJobOptions{}));
}

std::string range_error(const DdpJobOptions& options) {
  try {
    check_ranges(options);
  } catch (const OptionError& e) {
    return e.what();
  }
  return "";
}

TEST(JobOptionTable, RangeErrorsReadAsTheUserWroteThem) {
  DdpJobOptions options;
  options.bucket_size_mb = 0;
  EXPECT_EQ(range_error(options), "--bucket-mb: must be > 0, got 0");
  options = {};
  options.threads = 300;
  EXPECT_EQ(range_error(options), "--threads: must be in 0..256 (0: cores / world size), got 300");
  options = {};
  options.beta2 = 1;
  EXPECT_EQ(range_error(options), "--beta2: must be in [0, 1), got 1");
  options = {};
  options.lr = std::numeric_limits<double>::infinity();
  EXPECT_EQ(range_error(options), "--lr: must be > 0, got inf");
  options = {};
  options.collective_timeout_s = 3e6;
  EXPECT_EQ(range_error(options),
            "--timeout: must be in (0, 2592000] (seconds, 30 days at most), got 3000000");
}

std::string block_between(const std::string& text, const std::string& begin,
                          const std::string& end) {
  const size_t from = text.find(begin);
  const size_t to = text.find(end);
  if (from == std::string::npos || to == std::string::npos || to < from) return "";
  const size_t start = text.find('\n', from) + 1;
  return text.substr(start, to - start);
}

TEST(JobOptionTable, DocsJobFilesHoldsTheTable) {
  std::ifstream in(std::string(DDPD_SOURCE_DIR) + "/docs/job-files.md");
  ASSERT_TRUE(in) << "cannot read docs/job-files.md";
  std::stringstream text;
  text << in.rdbuf();
  const std::string expected = job_options_markdown();
  const std::string documented =
      block_between(text.str(), "<!-- options table begin", "<!-- options table end -->");
  if (documented != expected) {
    const std::string path = testing::TempDir() + "job-options-table.md";
    std::ofstream(path) << expected;
    ADD_FAILURE() << "docs/job-files.md's options table differs from the code's; the code's is "
                  << path << " (paste it between the markers)";
  }
}

}  // namespace
}  // namespace ddpd
