// The result JSON's readers (result_json.h), the mirror of result_json.cpp's writers.
#include <algorithm>
#include <stdexcept>
#include <tuple>

#include "ddpd/common/comm_options.h"
#include "ddpd/common/result_json.h"
#include "ddpd/common/step_fields.h"

namespace ddpd {
namespace {

// Reads keys of one JSON object, naming the path of a missing or mistyped one.
class Reader {
 public:
  Reader(const nlohmann::json& json, std::string path) : json_(json), path_(std::move(path)) {
    if (!json_.is_object()) fail("", "not an object");
  }

  template <typename T>
  T get(const char* key) const {
    const auto found = json_.find(key);
    if (found == json_.end()) fail(key, "missing");
    try {
      return found->get<T>();
    } catch (const nlohmann::json::exception&) {
      fail(key, "has the wrong type (" + std::string(found->type_name()) + ")");
    }
  }
  template <typename T>
  T get_or(const char* key, T otherwise) const {
    const auto found = json_.find(key);
    return found == json_.end() || found->is_null() ? otherwise : get<T>(key);
  }
  template <typename T>
  std::optional<T> optional(const char* key) const {
    const auto found = json_.find(key);
    if (found == json_.end() || found->is_null()) return std::nullopt;
    return get<T>(key);
  }
  Reader object(const char* key) const {
    const auto found = json_.find(key);
    if (found == json_.end()) fail(key, "missing");
    return Reader(*found, child(key));
  }
  // Each element of the array under `key` (an empty array when `required` is false and it is
  // missing).
  std::vector<Reader> array(const char* key, bool required = true) const {
    const auto found = json_.find(key);
    std::vector<Reader> out;
    if (found == json_.end()) {
      if (required) fail(key, "missing");
      return out;
    }
    if (!found->is_array()) fail(key, "not an array");
    for (size_t i = 0; i < found->size(); ++i) {
      out.emplace_back((*found)[i], child(key) + "[" + std::to_string(i) + "]");
    }
    return out;
  }
  bool has(const char* key) const { return json_.contains(key); }
  // One of the job model's enums, by its name; an unknown name fails naming the key.
  template <typename E>
  E enumerated(const char* key) const {
    return enum_of<E>(key, get<std::string>(key));
  }
  // `text` as one of E's names; an unknown one fails naming `key`.
  template <typename E>
  E enum_of(const char* key, const std::string& text) const {
    const auto& names = EnumInfo<E>::names();
    const auto it = std::find(names.begin(), names.end(), text);
    if (it == names.end()) fail(key, "must be " + choices_text(names) + ", got '" + text + "'");
    return static_cast<E>(it - names.begin());
  }
  template <typename E>
  E enumerated_or(const char* key, E otherwise) const {
    const auto found = json_.find(key);
    return found == json_.end() || found->is_null() ? otherwise : enumerated<E>(key);
  }
  // The string under `key` through `parse` (an enum's parser), naming the key when it throws
  // std::invalid_argument.
  template <typename Parse>
  auto parsed(const char* key, Parse parse) const {
    const std::string text = get<std::string>(key);
    try {
      return parse(text);
    } catch (const std::invalid_argument& e) {
      fail(key, e.what());
    }
  }

  // Fails naming `key` under this object's path (the whole object for "").
  [[noreturn]] void fail(const char* key, const std::string& what) const {
    const std::string where = *key ? child(key) : (path_.empty() ? "(top)" : path_);
    throw std::runtime_error("result JSON: " + where + ": " + what);
  }

 private:
  std::string child(const char* key) const { return path_.empty() ? key : path_ + "." + key; }

  const nlohmann::json& json_;
  std::string path_;
};

MemoryBytes memory_bytes(const Reader& m) {
  return {m.get<int64_t>("param_bytes"), m.get<int64_t>("grad_bytes"),
          m.get<int64_t>("optimizer_state_bytes"), m.get<int64_t>("peak_bytes")};
}

// [name, bytes, launch_s, complete_s, op]. Results written before the op was recorded have four
// elements; their op is the name's first part (all_reduce/bucket3), parsed here once.
ProfiledCollective profiled_collective(const Reader& s, const std::string& where,
                                       const nlohmann::json& row) {
  using Fields = std::tuple<std::string, int64_t, double, double>;
  ProfiledCollective c;
  const bool shaped = row.is_array() && (row.size() == 4 || row.size() == 5);
  try {
    if (shaped) {
      std::tie(c.name, c.bytes, c.launch_s, c.complete_s) =
          nlohmann::json::array({row[0], row[1], row[2], row[3]}).get<Fields>();
    }
  } catch (const nlohmann::json::exception&) {
    s.fail(where.c_str(), "has the wrong type (" + std::string(row.type_name()) + ")");
  }
  if (!shaped) s.fail(where.c_str(), "must be [name, bytes, launch_s, complete_s, op]");
  if (row.size() == 5 && !row[4].is_string()) s.fail(where.c_str(), "op must be a string");
  c.op = s.enum_of<Collective>(where.c_str(), row.size() == 5 ? row[4].get<std::string>()
                                                              : c.name.substr(0, c.name.find('/')));
  return c;
}

template <typename T>
void read_field(const Reader& s, const char* name, StepFieldPresence presence, T& field) {
  field = presence == StepFieldPresence::kRequired ? s.get<T>(name) : s.get_or<T>(name, T{});
}
template <typename T>
void read_field(const Reader& s, const char* name, StepFieldPresence, std::optional<T>& field) {
  field = s.optional<T>(name);
}

StepMetrics step_metrics(const Reader& s) {
  StepMetrics step;
  for_each_step_field([&](const char* name, auto member, StepFieldPresence presence) {
    read_field(s, name, presence, step.*member);
  });
  return step;
}

MemoryProfile memory_profile(const Reader& m) {
  MemoryProfile memory;
  memory.after_init = memory_bytes(m.object("after_init"));
  memory.before_step = memory_bytes(m.object("before_step"));
  memory.after_step = memory_bytes(m.object("after_step"));
  memory.step_peak_unsharded_bytes = m.get_or<int64_t>("step_peak_unsharded_bytes", 0);
  memory.step_peak_unsharded_parameter_bytes =
      m.get_or<int64_t>("step_peak_unsharded_parameter_bytes", 0);
  memory.step_peak_unsharded_gradient_bytes =
      m.get_or<int64_t>("step_peak_unsharded_gradient_bytes", 0);
  memory.step_peak_full_gradient_units = m.get_or<int64_t>("step_peak_full_gradient_units", 0);
  memory.step_peak_tensor_bytes = m.get_or<int64_t>("step_peak_tensor_bytes", 0);
  memory.step_peak_activation_bytes = m.get_or<int64_t>("step_peak_activation_bytes", 0);
  memory.loading_peak_rss_rise_bytes = m.get_or<int64_t>("loading_peak_rss_rise_bytes", -1);
  return memory;
}

Ceiling ceiling(const Reader& r, const char* median_key, const char* spread_key) {
  Ceiling c;
  c.median = r.get_or<double>(median_key, 0);
  const auto spread = r.get_or<std::vector<double>>(spread_key, {});
  if (spread.size() == 2) {
    c.min = spread[0];
    c.max = spread[1];
  }
  return c;
}

CommRow comm_row(const Reader& r) {
  CommRow row;
  row.collective = r.enumerated<CommSeries>("collective");
  row.size_bytes = r.get<int64_t>("size_bytes");
  row.time_s = r.get<double>("time_seconds");
  row.rank_mean_s = r.get_or<std::vector<double>>("rank_mean_seconds", {});
  row.rank_std_s = r.get_or<std::vector<double>>("rank_std_seconds", {});
  row.rank_min_s = r.get_or<std::vector<double>>("rank_min_seconds", {});
  row.rank_max_s = r.get_or<std::vector<double>>("rank_max_seconds", {});
  row.algbw_bytes_per_s = r.get<double>("algbw_bytes_per_second");
  row.busbw_bytes_per_s = r.get<double>("busbw_bytes_per_second");
  row.data_ok = r.get<bool>("data_ok");
  return row;
}

// The writer's compact arrays (result_json.cpp profile_json), element by element.
StepProfile step_profile(const nlohmann::json& json) {
  const Reader p(json, "profile");
  StepProfile profile;
  profile.host_cores = p.get<int>("host_cores");
  for (const auto& g : p.get<std::vector<std::pair<std::string, int64_t>>>("gradients")) {
    profile.gradients.push_back({g.first, g.second});
  }
  for (const auto& s : p.array("steps")) {
    ProfiledStep step;
    step.step = s.get<int64_t>("step");
    step.step_s = s.get<double>("step_s");
    step.zero_grad_s = s.get<double>("zero_grad_s");
    step.forward_s = s.get<double>("forward_s");
    step.backward_s = s.get<double>("backward_s");
    step.last_backward_start_s = s.get<double>("last_backward_start_s");
    step.last_backward_end_s = s.get<double>("last_backward_end_s");
    step.synced_s = s.get<double>("synced_s");
    step.optimizer_s = s.get<double>("optimizer_s");
    step.overlapped_optimizer_s = s.get<double>("overlapped_optimizer_s");
    step.ready_s = s.get<std::vector<double>>("ready_s");
    const auto rows = s.get<std::vector<nlohmann::json>>("collectives");
    for (size_t k = 0; k < rows.size(); ++k) {
      step.collectives.push_back(
          profiled_collective(s, "collectives[" + std::to_string(k) + "]", rows[k]));
    }
    profile.steps.push_back(std::move(step));
  }
  return profile;
}

std::optional<SharedBufferFallback> shared_buffer_fallback(const Reader& r) {
  if (!r.has("shared_buffers_fallback")) return std::nullopt;
  const Reader f = r.object("shared_buffers_fallback");
  SharedBufferFallback fallback;
  fallback.rank = f.get<int>("rank");
  fallback.step = f.parsed("step", shared_buffer_step_from_string);
  fallback.peer = f.get<int>("peer");
  fallback.error_number = f.get<int>("errno");
  return fallback;
}

}  // namespace

TrainingResult training_result_from_json(const nlohmann::json& json) {
  const Reader r(json, "");
  TrainingResult result;
  result.synchronization = r.get<std::string>("synchronization");
  result.transport = r.enumerated_or("transport", GroupTransport::kNone);
  result.transport_note = r.get_or<std::string>("transport_note", "");
  result.shared_buffers_fallback = shared_buffer_fallback(r);
  result.optimizer_sharding = r.get_or<bool>("optimizer_sharding", false);
  result.micro_batches = r.get_or<int64_t>("micro_batches", 1);
  result.gradient_wire_dtype = r.get_or<std::string>("gradient_wire_dtype", "fp32");
  result.initial_eval_loss = r.optional<double>("initial_eval_loss");
  for (const auto& s : r.array("steps")) result.steps.push_back(step_metrics(s));
  const Reader sum = r.object("summary");
  result.summary.final_loss = sum.optional<double>("final_loss");
  result.summary.median_step_seconds = sum.get<double>("median_step_seconds");
  result.summary.std_step_seconds = sum.get<double>("std_step_seconds");
  result.summary.max_param_spread = sum.get<double>("max_param_spread");
  result.summary.tokens_per_second = sum.get<double>("tokens_per_second");
  result.summary.median_comm_fraction = sum.get<double>("median_comm_fraction");
  result.memory = memory_profile(r.object("memory"));
  if (json.contains("profile")) result.profile = step_profile(json["profile"]);
  if (json.contains("heals")) {
    for (const auto& h : r.array("heals")) {
      result.heals.push_back({h.get<int>("generation"), h.get<int>("lost_rank"),
                              h.get<int>("source_rank"), h.get<int64_t>("resumed_step"),
                              h.get<int64_t>("state_bytes"), h.get<double>("regroup_seconds"),
                              h.get<double>("transfer_seconds"), h.get_or<int>("world_size", 0)});
    }
  }
  return result;
}

CommBenchResult comm_result_from_json(const nlohmann::json& json) {
  const Reader r(json, "");
  CommBenchResult result;
  result.world_size = r.get<int>("world_size");
  result.transport = r.enumerated_or("transport", GroupTransport::kGloo);
  result.transport_note = r.get_or<std::string>("transport_note", "");
  result.shared_buffers = r.get_or<bool>("shared_buffers", false);
  result.shared_buffers_fallback = shared_buffer_fallback(r);
  for (const auto& row : r.array("rows")) result.rows.push_back(comm_row(row));
  for (const auto& f : r.array("fits", false)) {
    result.fits.push_back({f.enumerated<CommSeries>("collective"), f.get<double>("alpha_seconds"),
                           f.get<double>("beta_bytes_per_second"),
                           f.get<double>("rms_relative_error")});
  }
  result.loopback = ceiling(r, "loopback_bytes_per_second", "loopback_spread_bytes_per_second");
  for (const auto& m : r.array("memory_by_size", false)) {
    result.memory_by_size[m.get<int64_t>("size_bytes")] = {
        ceiling(m.object("memcpy"), "bytes_per_second", "spread_bytes_per_second"),
        ceiling(m.object("in_place"), "bytes_per_second", "spread_bytes_per_second")};
  }
  if (result.memory_by_size.empty() && r.has("memcpy_bytes_per_second") && !result.rows.empty()) {
    // Older results kept only the largest size's ceilings.
    int64_t largest = 0;
    for (const auto& row : result.rows) largest = std::max(largest, row.size_bytes);
    result.memory_by_size[largest] = {
        ceiling(r, "memcpy_bytes_per_second", "memcpy_spread_bytes_per_second"),
        ceiling(r, "in_place_bytes_per_second", "in_place_spread_bytes_per_second")};
  }
  return result;
}

}  // namespace ddpd
