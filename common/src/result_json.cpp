#include "ddpd/common/result_json.h"

#include <cmath>
#include <cstdio>
#include <optional>

#include "ddpd/common/step_fields.h"

namespace ddpd {
namespace {

nlohmann::json memory_json(const MemoryBytes& m) {
  return {{"param_bytes", m.param_bytes},
          {"grad_bytes", m.grad_bytes},
          {"optimizer_state_bytes", m.optimizer_state_bytes},
          {"peak_bytes", m.peak_bytes}};
}

// Compact: one step's ready times are an array of numbers, its collectives arrays of
// [name, bytes, launch_s, complete_s, op] (about 60 gradients and a handful of buckets per step).
nlohmann::json profile_json(const StepProfile& profile) {
  nlohmann::json gradients = nlohmann::json::array();
  for (const auto& g : profile.gradients) gradients.push_back({g.name, g.bytes});
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& s : profile.steps) {
    nlohmann::json collectives = nlohmann::json::array();
    for (const auto& c : s.collectives) {
      collectives.push_back({c.name, c.bytes, c.launch_s, c.complete_s, enum_name(c.op)});
    }
    steps.push_back({{"step", s.step},
                     {"step_s", s.step_s},
                     {"zero_grad_s", s.zero_grad_s},
                     {"forward_s", s.forward_s},
                     {"backward_s", s.backward_s},
                     {"last_backward_start_s", s.last_backward_start_s},
                     {"last_backward_end_s", s.last_backward_end_s},
                     {"synced_s", s.synced_s},
                     {"optimizer_s", s.optimizer_s},
                     {"overlapped_optimizer_s", s.overlapped_optimizer_s},
                     {"ready_s", s.ready_s},
                     {"collectives", collectives}});
  }
  return {{"host_cores", profile.host_cores}, {"gradients", gradients}, {"steps", steps}};
}

// The fallback as data, and `reason`, the same in words for people (readers ignore it).
nlohmann::json fallback_json(const SharedBufferFallback& fallback) {
  return {{"rank", fallback.rank},
          {"step", to_string(fallback.step)},
          {"peer", fallback.peer},
          {"errno", fallback.error_number},
          {"reason", describe(fallback)}};
}

template <typename T>
nlohmann::json json_of(const T& value) {
  return value;
}
template <typename T>
nlohmann::json json_of(const std::optional<T>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

}  // namespace

nlohmann::json to_json(const TrainingResult& result) {
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& s : result.steps) {
    nlohmann::json row;
    for_each_step_field(
        [&](const char* name, auto member, StepFieldPresence) { row[name] = json_of(s.*member); });
    steps.push_back(std::move(row));
  }
  const auto& sum = result.summary;
  nlohmann::json out = {
      {"state", "SUCCEEDED"},
      {"synchronization", result.synchronization},
      {"transport", enum_name(result.transport)},
      {"optimizer_sharding", result.optimizer_sharding},
      {"micro_batches", result.micro_batches},
      {"gradient_wire_dtype", result.gradient_wire_dtype},
      {"initial_eval_loss", result.initial_eval_loss ? nlohmann::json(*result.initial_eval_loss)
                                                     : nlohmann::json(nullptr)},
      {"summary",
       {{"median_step_seconds", sum.median_step_seconds},
        {"std_step_seconds", sum.std_step_seconds},
        {"max_param_spread", sum.max_param_spread},
        {"tokens_per_second", sum.tokens_per_second},
        {"median_comm_fraction", sum.median_comm_fraction}}},
      {"steps", steps},
      {"memory",
       {{"after_init", memory_json(result.memory.after_init)},
        {"before_step", memory_json(result.memory.before_step)},
        {"after_step", memory_json(result.memory.after_step)},
        {"step_peak_unsharded_bytes", result.memory.step_peak_unsharded_bytes},
        {"step_peak_unsharded_parameter_bytes", result.memory.step_peak_unsharded_parameter_bytes},
        {"step_peak_unsharded_gradient_bytes", result.memory.step_peak_unsharded_gradient_bytes},
        {"step_peak_full_gradient_units", result.memory.step_peak_full_gradient_units},
        {"step_peak_tensor_bytes", result.memory.step_peak_tensor_bytes},
        {"step_peak_activation_bytes", result.memory.step_peak_activation_bytes},
        {"loading_peak_rss_rise_bytes", result.memory.loading_peak_rss_rise_bytes}}}};
  // Absent when no step ran: a 0 would read as a perfect loss.
  if (sum.final_loss) out["summary"]["final_loss"] = *sum.final_loss;
  if (!result.transport_note.empty()) out["transport_note"] = result.transport_note;
  if (result.shared_buffers_fallback) {
    out["shared_buffers_fallback"] = fallback_json(*result.shared_buffers_fallback);
  }
  if (!result.profile.steps.empty()) out["profile"] = profile_json(result.profile);
  if (!result.heals.empty()) {
    nlohmann::json heals = nlohmann::json::array();
    for (const auto& h : result.heals) {
      heals.push_back({{"generation", h.generation},
                       {"lost_rank", h.lost_rank},
                       {"source_rank", h.source_rank},
                       {"resumed_step", h.resumed_step},
                       {"state_bytes", h.state_bytes},
                       {"regroup_seconds", h.regroup_seconds},
                       {"transfer_seconds", h.transfer_seconds},
                       {"world_size", h.world_size}});
    }
    out["heals"] = std::move(heals);
  }
  return out;
}

nlohmann::json to_json(const CommBenchResult& result) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : result.rows) {
    rows.push_back({{"collective", enum_name(r.collective)},
                    {"size_bytes", r.size_bytes},
                    {"time_seconds", r.time_s},
                    {"rank_mean_seconds", r.rank_mean_s},
                    {"rank_std_seconds", r.rank_std_s},
                    {"rank_min_seconds", r.rank_min_s},
                    {"rank_max_seconds", r.rank_max_s},
                    {"algbw_bytes_per_second", r.algbw_bytes_per_s},
                    {"busbw_bytes_per_second", r.busbw_bytes_per_s},
                    {"fraction_of_loopback", fraction_of_loopback(r, result)},
                    {"fraction_of_memcpy", fraction_of_memcpy(r, result)},
                    {"fraction_of_in_place", fraction_of_in_place(r, result)},
                    {"above_ceiling", above_own_ceiling(result, r)},
                    {"data_ok", r.data_ok}});
  }
  nlohmann::json fits = nlohmann::json::array();
  for (const auto& f : result.fits) {
    fits.push_back({{"collective", enum_name(f.collective)},
                    {"alpha_seconds", f.alpha_s},
                    {"beta_bytes_per_second", f.beta_bytes_per_s},
                    {"rms_relative_error", f.rms_relative_error}});
  }
  // The largest size's memory ceilings (DRAM-bound) stand for the host; every size's are listed.
  const MemoryCeilings largest =
      result.memory_by_size.empty() ? MemoryCeilings{} : result.memory_by_size.rbegin()->second;
  auto ceiling_json = [](const Ceiling& c) {
    return nlohmann::json{{"bytes_per_second", c.median},
                          {"spread_bytes_per_second", {c.min, c.max}}};
  };
  nlohmann::json memory_by_size = nlohmann::json::array();
  for (const auto& [size, c] : result.memory_by_size) {
    memory_by_size.push_back({{"size_bytes", size},
                              {"memcpy", ceiling_json(c.memcpy)},
                              {"in_place", ceiling_json(c.in_place)}});
  }
  nlohmann::json out = {
      {"state", "SUCCEEDED"},
      {"world_size", result.world_size},
      {"transport", enum_name(result.transport)},
      {"loopback_bytes_per_second", result.loopback.median},
      {"loopback_spread_bytes_per_second", {result.loopback.min, result.loopback.max}},
      {"memcpy_bytes_per_second", largest.memcpy.median},
      {"memcpy_spread_bytes_per_second", {largest.memcpy.min, largest.memcpy.max}},
      {"in_place_bytes_per_second", largest.in_place.median},
      {"in_place_spread_bytes_per_second", {largest.in_place.min, largest.in_place.max}},
      {"memory_by_size", memory_by_size},
      {"rows", rows},
      {"fits", fits},
      {"shared_buffers", result.shared_buffers}};
  if (!result.transport_note.empty()) out["transport_note"] = result.transport_note;
  if (result.shared_buffers_fallback) {
    out["shared_buffers_fallback"] = fallback_json(*result.shared_buffers_fallback);
  }
  return out;
}

nlohmann::json failure_json(const std::string& error) {
  return {{"state", "FAILED"}, {"error", error}};
}

}  // namespace ddpd
