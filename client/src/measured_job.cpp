#include "measured_job.h"

#include <google/protobuf/util/json_util.h>

#include <fstream>
#include <sstream>

#include "ddpd/api/spec_convert.h"
#include "ddpd/common/result_json.h"

namespace ddpd::client {
namespace {

MeasuredJob from_parts(const std::string& job_id, const v1::JobSpec& spec, const std::string& state,
                       const nlohmann::json& result, const std::string& flag) {
  if (!spec.has_ddp()) throw OptionError(flag, job_id + " is a comm job, not a DDP job");
  if (state != "SUCCEEDED") {
    throw OptionError(flag, job_id + " is " + state + "; the replay needs a job that succeeded");
  }
  MeasuredJob job;
  job.job_id = job_id;
  job.options = from_proto(spec.ddp());
  job.world_size = spec.world_size();
  job.result = training_result_from_json(result);
  return job;
}

nlohmann::json read_json(const std::string& path, const std::string& flag) {
  std::ifstream in(path);
  if (!in) throw OptionError(flag, "cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  try {
    return nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    throw OptionError(flag, path + " is not JSON (" + e.what() + ")");
  }
}

}  // namespace

nlohmann::json spec_json(const v1::JobSpec& spec) {
  std::string text;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;  // false and 0 too: the spec whole
  (void)google::protobuf::util::MessageToJsonString(spec, &text, options);
  return nlohmann::json::parse(text);
}

v1::JobSpec spec_from_json(const nlohmann::json& json) {
  v1::JobSpec spec;
  const auto status = google::protobuf::util::JsonStringToMessage(json.dump(), &spec);
  if (!status.ok()) throw std::runtime_error("spec: " + std::string(status.message()));
  return spec;
}

MeasuredJob measured_job(const v1::GetJobReply& reply, const std::string& flag) {
  const v1::Job& job = reply.job();
  if (job.result_json().empty()) {
    throw OptionError(flag,
                      job.job_id() + " has no result (" + v1::JobState_Name(job.state()) + ")");
  }
  return from_parts(job.job_id(), job.spec(), v1::JobState_Name(job.state()),
                    nlohmann::json::parse(job.result_json()), flag);
}

MeasuredJob measured_job_from_file(const std::string& path, const std::string& flag) {
  const nlohmann::json json = read_json(path, flag);
  if (!json.contains("spec")) {
    throw OptionError(flag, path +
                                " has no \"spec\": write it with ddpctl show JOB --json or "
                                "ddpctl local ddp --json");
  }
  return from_parts(json.value("job_id", path), spec_from_json(json["spec"]),
                    json.value("state", ""), json, flag);
}

LinkModel comm_job_link(const v1::GetJobReply& reply, const std::string& flag) {
  const v1::Job& job = reply.job();
  if (!job.spec().has_comm() || job.state() != v1::SUCCEEDED) {
    throw OptionError(flag, job.job_id() + " is not a succeeded comm job");
  }
  return link_from_comm_job(comm_result_from_json(nlohmann::json::parse(job.result_json())),
                            job.job_id());
}

LinkModel comm_link_from_file(const std::string& path, const std::string& flag) {
  nlohmann::json json = read_json(path, flag);
  if (json.is_array() && !json.empty()) json = json.front();  // local comm: one per world size
  try {
    return link_from_comm_job(comm_result_from_json(json), path);
  } catch (const std::runtime_error& e) {
    throw OptionError(flag, path + ": " + e.what());
  }
}

}  // namespace ddpd::client
