#include "whatif_report.h"

#include <cstdio>
#include <sstream>

namespace ddpd::client {
namespace {

std::string format(const char* pattern, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, pattern, value);
  return buffer;
}

std::string change(double measured, double predicted) {
  if (measured == 0) return predicted == 0 ? "0%" : "new";
  return format("%+.1f%%", 100.0 * (predicted - measured) / measured);
}

}  // namespace

std::string configuration_line(const StepFigures& f) {
  std::string line = enum_name(f.options.strategy);
  if (f.options.strategy == Strategy::kBucketed) {
    line += " " + format("%g", f.options.bucket_size_mb) + " MB";
  }
  line += ", " + std::to_string(f.world_size) + (f.world_size == 1 ? " rank" : " ranks");
  if (f.world_size > 1) line += " " + enum_name(f.transport);
  if (f.options.shard_optimizer && f.world_size > 1) line += ", ZeRO-1";
  if (f.options.grad_accum > 1)
    line += ", " + std::to_string(f.options.grad_accum) + " micro-batches";
  return line;
}

std::string whatif_table(const StepFigures& m, const StepFigures& p, const LinkModel& link) {
  std::ostringstream out;
  char row[160];
  out << "measured:  " << configuration_line(m) << "\npredicted: " << configuration_line(p)
      << "\n\n";
  std::snprintf(row, sizeof row, "%-26s %12s %12s %9s\n", "", "measured", "predicted", "change");
  out << row;
  auto line = [&](const char* name, double a, double b, double unit, const char* pattern) {
    std::snprintf(row, sizeof row, "%-26s %12s %12s %9s\n", name, format(pattern, a * unit).c_str(),
                  format(pattern, b * unit).c_str(), change(a, b).c_str());
    out << row;
  };
  line("step ms", m.step_s, p.step_s, 1e3, "%.1f");
  line("  forward ms", m.forward_s, p.forward_s, 1e3, "%.1f");
  line("  backward ms", m.backward_s, p.backward_s, 1e3, "%.1f");
  line("  optimizer ms", m.optimizer_s, p.optimizer_s, 1e3, "%.1f");
  line("  exposed comm ms", m.exposed_comm_s, p.exposed_comm_s, 1e3, "%.1f");
  line("comm in flight ms", m.comm_s, p.comm_s, 1e3, "%.1f");
  line("comm fraction", m.comm_fraction, p.comm_fraction, 1.0, "%.3f");
  line("tokens/s", m.tokens_per_s, p.tokens_per_s, 1.0, "%.0f");
  constexpr double kMB = 1e-6;
  line("parameters MB/rank", m.memory.parameter_bytes, p.memory.parameter_bytes, kMB, "%.1f");
  line("gradients MB/rank", m.memory.gradient_bytes, p.memory.gradient_bytes, kMB, "%.1f");
  line("optimizer state MB/rank", m.memory.optimizer_bytes, p.memory.optimizer_bytes, kMB, "%.1f");
  line("activations MB/rank", m.memory.activation_bytes, p.memory.activation_bytes, kMB, "%.1f");
  line("peak MB/rank", m.peak_bytes, p.peak_bytes, kMB, "%.1f");
  out << "\nlink: all-reduce = " << format("%.3f", link.alpha_s * 1e3) << " ms + bytes / "
      << format("%.2f", link.seconds_per_byte > 0 ? 1e-9 / link.seconds_per_byte : 0) << " GB/s at "
      << link.world_size << " ranks on " << enum_name(link.transport) << "; "
      << format("%.0f", 100 * link.speed_while_computing)
      << "% of that speed while the rank computes (" << link.source << ", rms error "
      << format("%.0f", 100 * link.rms_relative_error) << "%)\n";
  out << "not predicted:\n";
  for (const auto& limit : replay_limits()) out << "  - " << limit << "\n";
  return out.str();
}

nlohmann::json figures_json(const StepFigures& f) {
  return {{"configuration", configuration_line(f)},
          {"strategy", enum_name(f.options.strategy)},
          {"bucket_size_mb", f.options.bucket_size_mb},
          {"world_size", f.world_size},
          {"transport", enum_name(f.transport)},
          {"shard_optimizer", f.options.shard_optimizer && f.world_size > 1},
          {"grad_accum", f.options.grad_accum},
          {"step_seconds", f.step_s},
          {"forward_seconds", f.forward_s},
          {"backward_seconds", f.backward_s},
          {"optimizer_seconds", f.optimizer_s},
          {"comm_seconds", f.comm_s},
          {"exposed_comm_seconds", f.exposed_comm_s},
          {"comm_fraction", f.comm_fraction},
          {"tokens_per_second", f.tokens_per_s},
          {"memory",
           {{"parameter_bytes", f.memory.parameter_bytes},
            {"gradient_bytes", f.memory.gradient_bytes},
            {"optimizer_state_bytes", f.memory.optimizer_bytes},
            {"activation_bytes", f.memory.activation_bytes},
            {"peak_bytes", f.peak_bytes}}}};
}

nlohmann::json link_json(const LinkModel& link) {
  return {{"transport", enum_name(link.transport)},
          {"world_size", link.world_size},
          {"alpha_s", link.alpha_s},
          {"seconds_per_byte", link.seconds_per_byte},
          {"samples", link.samples},
          {"rms_relative_error", link.rms_relative_error},
          {"source", link.source}};
}

}  // namespace ddpd::client
