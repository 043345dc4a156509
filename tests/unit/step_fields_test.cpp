// The step metrics are named once (ddpd/common/step_fields.h): the result JSON and the API's
// StepReport are copied through that list. These tests keep the list, StepMetrics and StepReport
// the same schema: a member added to StepMetrics and not to the list, a field of the list that
// StepReport lacks (or holds with another type), or a StepReport field no list entry fills, fails.
#include <google/protobuf/descriptor.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <set>
#include <string>
#include <type_traits>
#include <utility>

#include "ddpd/api/step_report.h"
#include "ddpd/common/result_json.h"
#include "ddpd/common/step_fields.h"

namespace ddpd {
namespace {

size_t listed_fields() {
  size_t n = 0;
  for_each_step_field([&](const char*, auto, StepFieldPresence) { ++n; });
  return n;
}

// StepMetrics' members, counted by the compiler: the structured binding below compiles only while
// StepMetrics has exactly these 19. A member added to it stops this file from compiling until it is
// added here, and the list (step_fields.h) must then hold it too for the test to pass.
TEST(StepFields, TheListCoversEveryMemberOfStepMetricsButItsSpans) {
  StepMetrics m;
  [[maybe_unused]] auto& [step, loss, step_seconds, forward_seconds, backward_seconds,
                          optimizer_seconds, comm_seconds, exposed_comm_seconds, comm_fraction,
                          tokens_per_second, gradient_sync_bytes, first_sample, samples,
                          checkpoint_seconds, lr, grad_norm, param_spread, eval_loss, spans] = m;
  constexpr size_t kMembers = 19;
  EXPECT_EQ(listed_fields() + 1, kMembers)
      << "a member of StepMetrics is missing from ddpd/common/step_fields.h";
  // And each listed member is a distinct one: the list names no member twice.
  std::set<const void*> addresses;
  for_each_step_field([&](const char*, auto member, StepFieldPresence) {
    addresses.insert(static_cast<const void*>(&(m.*member)));
  });
  EXPECT_EQ(addresses.size(), listed_fields());
}

// Field k of the list set to a value no other field has (k + 1 + 0.25, or k + 1 for integers).
StepMetrics every_field_distinct() {
  StepMetrics m;
  int k = 0;
  for_each_step_field([&](const char*, auto member, StepFieldPresence) {
    using Field = std::decay_t<decltype(m.*member)>;
    ++k;
    if constexpr (std::is_same_v<Field, int64_t>) {
      m.*member = k;
    } else {
      m.*member = k + 0.25;
    }
  });
  return m;
}

TEST(StepFields, StepReportHoldsExactlyTheListedFieldsByNameAndType) {
  using google::protobuf::FieldDescriptor;
  const auto* descriptor = v1::StepReport::descriptor();
  std::set<std::string> listed;
  for_each_step_field([&](const char* name, auto member, StepFieldPresence presence) {
    listed.insert(name);
    const FieldDescriptor* field = descriptor->FindFieldByName(name);
    ASSERT_NE(field, nullptr) << "StepReport has no field '" << name << "'";
    using Field = std::decay_t<decltype(std::declval<StepMetrics>().*member)>;
    const bool integer = std::is_same_v<Field, int64_t>;
    EXPECT_EQ(field->cpp_type(),
              integer ? FieldDescriptor::CPPTYPE_INT64 : FieldDescriptor::CPPTYPE_DOUBLE)
        << name;
    // An optional member is an optional field (presence kept), and only then.
    EXPECT_EQ(field->has_presence(), presence == StepFieldPresence::kOptional) << name;
  });
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const std::string name = descriptor->field(i)->name();
    if (name == "rank" || name == "attempt" || name == "spans") continue;
    EXPECT_TRUE(listed.count(name)) << "StepReport's '" << name << "' is in no list entry";
  }
}

TEST(StepFields, EveryFieldSurvivesTheReportAndTheJson) {
  const StepMetrics m = every_field_distinct();
  const v1::StepReport report = to_report(m, 3, 2);
  EXPECT_EQ(report.rank(), 3);
  EXPECT_EQ(report.attempt(), 2);
  const StepMetrics via_report = from_report(report);
  TrainingResult result;
  result.steps.push_back(m);
  const StepMetrics via_json = training_result_from_json(to_json(result)).steps.at(0);
  for_each_step_field([&](const char* name, auto member, StepFieldPresence) {
    EXPECT_EQ(via_report.*member, m.*member) << name << " through StepReport";
    EXPECT_EQ(via_json.*member, m.*member) << name << " through the result JSON";
  });
  // Absent optional fields stay absent.
  const StepMetrics bare = from_report(to_report(StepMetrics{}, 0, 0));
  EXPECT_FALSE(bare.grad_norm || bare.param_spread || bare.eval_loss);
}

}  // namespace
}  // namespace ddpd
