// Every flag of a DDP job names a field of the API's DdpSpec (proto_field), so `ddpctl show
// --spec` writes it and `submit -f` reads it back. `--data` once mapped to a field that does not
// exist ("data" for data_path), and a resubmitted spec trained on random tokens without a word.
// The flags are enumerated from the CLI itself, so a flag added later cannot be forgotten.
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <map>

#include "ddpd/api/spec_convert.h"
#include "ddpd/common/ddp_flags.h"
#include "job_file.h"

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

// A DdpSpec with every field set to a value that is not its default (valid where the flag's
// own conversion checks it), so a field the round trip drops shows as a difference.
v1::DdpSpec spec_setting_every_field() {
  using google::protobuf::FieldDescriptor;
  const std::map<std::string, std::string> texts = {
      {"model", "small"},        {"strategy", "fsdp"},
      {"precision", "bf16"},     {"attention", "flash"},
      {"device", "cuda"},        {"data_dtype", "int32"},
      {"on_stall", "warn"},      {"transport", "shm"},
      {"lr_schedule", "cosine"}, {"grad_compression", "fp16"},
      {"fsdp_units", "whole"},   {"inject", "slow:rank=1,step=2,factor=3"},
      {"eval_order", "file"},    {"activation_checkpointing", "selective"}};
  v1::DdpSpec spec;
  const auto* reflection = spec.GetReflection();
  const auto* descriptor = spec.GetDescriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    const int distinct = 3 + i;  // every field its own value
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_BOOL:
        reflection->SetBool(&spec, field, true);
        break;
      case FieldDescriptor::CPPTYPE_INT32:
        reflection->SetInt32(&spec, field, distinct);
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        reflection->SetInt64(&spec, field, distinct);
        break;
      case FieldDescriptor::CPPTYPE_UINT64:
        reflection->SetUInt64(&spec, field, distinct);
        break;
      case FieldDescriptor::CPPTYPE_DOUBLE:
        reflection->SetDouble(&spec, field, 0.1 * distinct + 1.0 / 3);  // needs 17 digits
        break;
      case FieldDescriptor::CPPTYPE_STRING: {
        const auto text = texts.find(field->name());
        reflection->SetString(&spec, field,
                              text != texts.end() ? text->second : "/data/" + field->name());
        break;
      }
      default:
        ADD_FAILURE() << field->name() << ": a field type this test does not set";
    }
  }
  return spec;
}

// show --spec, then submit -f: the spec comes back equal, field by field. The fields are
// enumerated from the proto, so the next field added cannot be forgotten.
TEST(SpecFields, ShowSpecThenSubmitFileGivesBackEveryField) {
  v1::JobSpec original;
  original.set_world_size(3);
  *original.mutable_ddp() = spec_setting_every_field();
  char path[] = "/tmp/ddpd-spec-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << client::job_file_yaml(original);

  CLI::App app;
  int world_size = 0;
  app.add_option("--world-size", world_size);
  DdpJobOptions options;
  CLI::App* ddp = app.add_subcommand("ddp");
  add_ddp_flags(*ddp, options);
  app.parse(std::vector<std::string>{"ddp"});  // reversed argv: the subcommand alone
  client::apply_job_file(path, *ddp);
  std::remove(path);

  const v1::DdpSpec back = to_proto(options);
  google::protobuf::util::MessageDifferencer differ;
  std::string differences;
  differ.ReportDifferencesToString(&differences);
  EXPECT_TRUE(differ.Compare(original.ddp(), back)) << differences;
  EXPECT_EQ(world_size, 3);
}

}  // namespace
}  // namespace ddpd
