// Every flag of a DDP job names a field of the API's DdpSpec (proto_field), so `ddpctl show
// --spec` writes it and `submit -f` reads it back. `--data` once mapped to a field that does not
// exist ("data" for data_path), and a resubmitted spec trained on random tokens without a word.
// The flags are enumerated from the CLI itself, so a flag added later cannot be forgotten.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>

#include "ddpd/ddp_flags.h"
#include "ddpd/spec_convert.h"

namespace ddpd {
namespace {

TEST(SpecFields, EveryDdpFlagNamesADdpSpecField) {
  CLI::App app;
  DdpJobOptions options;
  add_ddp_flags(app, options);
  const auto* descriptor = v1::DdpSpec::descriptor();
  int checked = 0;
  for (const CLI::Option* option : app.get_options()) {
    const std::string flag = option->get_name();
    if (flag == "--help") continue;
    EXPECT_NE(descriptor->FindFieldByName(proto_field(flag)), nullptr)
        << flag << " maps to '" << proto_field(flag) << "', which DdpSpec does not have";
    ++checked;
  }
  EXPECT_GT(checked, 40);
}

}  // namespace
}  // namespace ddpd
