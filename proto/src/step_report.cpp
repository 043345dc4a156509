#include "ddpd/api/step_report.h"

#include <optional>
#include <stdexcept>
#include <string>

#include "ddpd/common/step_fields.h"

namespace ddpd {
namespace {

using google::protobuf::FieldDescriptor;

const FieldDescriptor& field_named(const char* name) {
  const FieldDescriptor* field = v1::StepReport::descriptor()->FindFieldByName(name);
  if (field == nullptr) {
    // tests/unit/step_fields_test.cpp keeps this from happening.
    throw std::logic_error(std::string("StepReport has no field '") + name + "'");
  }
  return *field;
}

void write_field(v1::StepReport& r, const FieldDescriptor& f, double value) {
  r.GetReflection()->SetDouble(&r, &f, value);
}
void write_field(v1::StepReport& r, const FieldDescriptor& f, int64_t value) {
  r.GetReflection()->SetInt64(&r, &f, value);
}
template <typename T>
void write_field(v1::StepReport& r, const FieldDescriptor& f, const std::optional<T>& value) {
  if (value) write_field(r, f, *value);
}

void read_field(const v1::StepReport& r, const FieldDescriptor& f, double& value) {
  value = r.GetReflection()->GetDouble(r, &f);
}
void read_field(const v1::StepReport& r, const FieldDescriptor& f, int64_t& value) {
  value = r.GetReflection()->GetInt64(r, &f);
}
template <typename T>
void read_field(const v1::StepReport& r, const FieldDescriptor& f, std::optional<T>& value) {
  value.reset();
  if (!r.GetReflection()->HasField(r, &f)) return;
  T present{};
  read_field(r, f, present);
  value = present;
}

}  // namespace

v1::StepReport to_report(const StepMetrics& metrics, int rank, int attempt) {
  v1::StepReport r;
  r.set_rank(rank);
  r.set_attempt(attempt);
  for_each_step_field([&](const char* name, auto member, StepFieldPresence) {
    write_field(r, field_named(name), metrics.*member);
  });
  return r;
}

StepMetrics from_report(const v1::StepReport& report) {
  StepMetrics m;
  for_each_step_field([&](const char* name, auto member, StepFieldPresence) {
    read_field(report, field_named(name), m.*member);
  });
  return m;
}

}  // namespace ddpd
