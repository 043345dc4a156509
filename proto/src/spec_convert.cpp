#include "ddpd/api/spec_convert.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <type_traits>

#include "ddpd/common/job_option_table.h"

namespace ddpd {

namespace {

using google::protobuf::FieldDescriptor;

// An option's DdpSpec field; the table names fields that exist (job_option_table_test.cpp).
template <typename T>
const FieldDescriptor& field_of(const JobOption<T>& entry) {
  const FieldDescriptor* field = v1::DdpSpec::descriptor()->FindFieldByName(entry.proto_field);
  if (field == nullptr) throw std::logic_error(std::string("DdpSpec has no ") + entry.proto_field);
  return *field;
}

// Writes each option into its field, by name through protobuf's reflection. An unset shape
// override leaves its field unset (the preset's value).
struct SpecWriter {
  const DdpJobOptions& options;
  v1::DdpSpec& spec;

  template <typename T>
  void operator()(const JobOption<T>& entry) const {
    const FieldDescriptor& field = field_of(entry);
    const auto* reflection = spec.GetReflection();
    const T& value = options.*(entry.member);
    if constexpr (std::is_same_v<T, std::optional<int64_t>>) {
      if (value) reflection->SetInt64(&spec, &field, *value);
    } else if constexpr (std::is_same_v<T, bool>) {
      reflection->SetBool(&spec, &field, value);
    } else if constexpr (std::is_same_v<T, std::string>) {
      reflection->SetString(&spec, &field, value);
    } else if constexpr (HasEnumNames<T>::value) {
      reflection->SetString(&spec, &field, enum_name(value));
    } else if constexpr (std::is_same_v<T, int>) {
      reflection->SetInt32(&spec, &field, value);
    } else if constexpr (std::is_same_v<T, int64_t>) {
      reflection->SetInt64(&spec, &field, value);
    } else if constexpr (std::is_same_v<T, uint64_t>) {
      reflection->SetUInt64(&spec, &field, value);
    } else {
      static_assert(std::is_same_v<T, double>, "an option type DdpSpec cannot hold");
      reflection->SetDouble(&spec, &field, value);
    }
  }
};

// Reads each option from its field. A field that is unset (proto3 presence) or an empty string
// keeps DdpJobOptions' default: an API caller sets only what it means.
struct SpecReader {
  const v1::DdpSpec& spec;
  DdpJobOptions& options;

  template <typename T>
  void operator()(const JobOption<T>& entry) const {
    const FieldDescriptor& field = field_of(entry);
    const auto* reflection = spec.GetReflection();
    if (field.has_presence() && !reflection->HasField(spec, &field)) return;
    T& value = options.*(entry.member);
    if constexpr (std::is_same_v<T, std::optional<int64_t>>) {
      value = reflection->GetInt64(spec, &field);
    } else if constexpr (std::is_same_v<T, bool>) {
      value = reflection->GetBool(spec, &field);
    } else if constexpr (std::is_same_v<T, std::string> || HasEnumNames<T>::value) {
      const std::string text = reflection->GetString(spec, &field);
      if (text.empty()) return;
      if constexpr (std::is_same_v<T, std::string>) {
        value = text;
      } else {
        value = parse_enum<T>(text);
      }
    } else if constexpr (std::is_same_v<T, int>) {
      value = reflection->GetInt32(spec, &field);
    } else if constexpr (std::is_same_v<T, int64_t>) {
      value = reflection->GetInt64(spec, &field);
    } else if constexpr (std::is_same_v<T, uint64_t>) {
      value = reflection->GetUInt64(spec, &field);
    } else {
      value = reflection->GetDouble(spec, &field);
    }
  }
};

}  // namespace

v1::DdpSpec to_proto(const DdpJobOptions& options) {
  v1::DdpSpec spec;
  for_each_job_option(SpecWriter{options, spec});
  return spec;
}

DdpJobOptions from_proto(const v1::DdpSpec& spec) {
  DdpJobOptions options;
  for_each_job_option(SpecReader{spec, options});
  return options;
}

v1::CommSpec to_proto(const CommJob& job) {
  v1::CommSpec s;
  for (const Collective c : job.bench.collectives) s.add_collectives(enum_name(c));
  for (int64_t size : job.bench.sizes_bytes) s.add_sizes_bytes(size);
  s.set_backend(enum_name(job.backend));
  s.set_transport(enum_name(job.transport));
  s.set_dtype(enum_name(job.bench.dtype));
  s.set_warmup(job.bench.warmup);
  s.set_iters(job.bench.iters);
  s.set_shared_buffers(job.bench.shared_buffers);
  s.set_collective_timeout_s(job.collective_timeout_s);
  return s;
}

CommJob from_proto(const v1::CommSpec& s) {
  CommJob job;
  if (s.collectives_size() > 0) {
    job.bench.collectives.clear();
    for (const auto& name : s.collectives()) {
      job.bench.collectives.push_back(parse_enum<Collective>(name));
    }
  }
  if (s.sizes_bytes_size() > 0)
    job.bench.sizes_bytes.assign(s.sizes_bytes().begin(), s.sizes_bytes().end());
  if (!s.backend().empty()) job.backend = parse_enum<Backend>(s.backend());
  if (!s.transport().empty()) job.transport = parse_enum<Transport>(s.transport());
  if (!s.dtype().empty()) job.bench.dtype = parse_enum<CommDtype>(s.dtype());
  if (s.has_warmup()) job.bench.warmup = s.warmup();
  if (s.has_iters()) job.bench.iters = s.iters();
  if (s.has_shared_buffers()) job.bench.shared_buffers = s.shared_buffers();
  if (s.has_collective_timeout_s()) job.collective_timeout_s = s.collective_timeout_s();
  return job;
}

v1::RankProgress to_proto(const RankPosition& position) {
  v1::RankProgress p;
  p.set_phase(position.phase);
  p.set_step(position.step);
  p.set_last_enqueued(position.last_enqueued);
  p.set_last_completed(position.last_completed);
  if (position.oldest_pending) {
    const CollectiveRecord& c = *position.oldest_pending;
    auto* pending = p.mutable_oldest_pending();
    pending->set_seq(c.seq);
    pending->set_op(c.op);
    pending->set_tag(c.tag);
    pending->set_numel(c.numel);
    pending->set_dtype(c.dtype);
    pending->set_age_seconds(c.age_seconds);
  }
  return p;
}

RankPosition from_proto(const v1::RankProgress& p) {
  RankPosition position{p.phase(), p.step(), p.last_enqueued(), p.last_completed(), std::nullopt};
  if (p.has_oldest_pending()) {
    const auto& c = p.oldest_pending();
    position.oldest_pending =
        CollectiveRecord{c.seq(), c.op(), c.tag(), c.numel(), c.dtype(), c.age_seconds()};
  }
  return position;
}

std::string kind_name(const v1::JobSpec& spec) {
  switch (spec.kind_case()) {
    case v1::JobSpec::kDdp:
      return "ddp";
    case v1::JobSpec::kComm:
      return "comm";
    default:
      return "unknown";
  }
}

std::string proto_field(const std::string& flag) {
  // A job option's field is the table's; a comm job's flags and the world size are these, or
  // the flag in snake_case.
  static const std::map<std::string, std::string> fields = [] {
    std::map<std::string, std::string> by_flag = {
        {"--collective", "collectives"}, {"--sizes", "sizes_bytes"}, {"WORLD_SIZE", "world_size"}};
    for_each_job_option([&by_flag](const auto& entry) { by_flag[entry.flag] = entry.proto_field; });
    return by_flag;
  }();
  if (auto it = fields.find(flag); it != fields.end()) return it->second;
  if (flag.rfind("--", 0) != 0) return flag;  // already a field name ("kind")
  std::string field = flag.substr(2);
  std::replace(field.begin(), field.end(), '-', '_');
  return field;
}

namespace {

DdpJobOptions validate_spec_flags(const v1::JobSpec& spec) {
  if (spec.world_size() < 1) {
    throw OptionError("--world-size", "must be >= 1, got " + std::to_string(spec.world_size()));
  }
  switch (spec.kind_case()) {
    case v1::JobSpec::kDdp: {
      DdpJobOptions options = from_proto(spec.ddp());
      validate(options, spec.world_size());
      return options;
    }
    case v1::JobSpec::kComm: {
      const CommJob job = from_proto(spec.comm());
      validate(job.bench);
      if (job.transport == Transport::kShm && job.backend != Backend::kGloo) {
        throw OptionError("--transport", "shm is for the gloo backend (CPU ranks)");
      }
      if (!(job.collective_timeout_s > 0 &&
            job.collective_timeout_s <= kMaxCollectiveTimeoutSeconds)) {
        throw OptionError("--timeout", "must be > 0 and at most 2592000 seconds (30 days)");
      }
      return {};
    }
    case v1::JobSpec::KIND_NOT_SET:
      break;
  }
  throw OptionError("kind", "the job spec names no job kind");
}

}  // namespace

DdpJobOptions ddp_options_of(const v1::JobSpec& spec) {
  return spec.has_ddp() ? from_proto(spec.ddp()) : DdpJobOptions{};
}

DdpJobOptions validate_spec(const v1::JobSpec& spec, FieldNames names) {
  try {
    return validate_spec_flags(spec);
  } catch (const OptionError& e) {
    if (names == FieldNames::kFlag) throw;
    throw naming_proto_field(e);
  }
}

OptionError naming_proto_field(const OptionError& error) {
  // what() is "<flag>: <reason>"; keep the reason, name the field.
  return OptionError(proto_field(error.flag()),
                     std::string(error.what()).substr(error.flag().size() + 2));
}

bool is_terminal(v1::JobState state) {
  return state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED;
}

std::string failure_text(const v1::JobResult& result) {
  return result.cause() == v1::RANK_FAILURE_DESYNC
             ? "collective desync (--check-collectives): " + result.error()
             : result.error();
}

}  // namespace ddpd
