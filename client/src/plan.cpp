#include "plan.h"

#include <algorithm>
#include <cmath>

namespace ddpd::plan {

MemoryPlan memory_plan(const FfnModel& model, double activation_tokens, double device_bytes) {
  const double p = static_cast<double>(model.parameters());
  MemoryPlan plan;
  plan.weights_bytes = 4 * p;
  plan.gradients_bytes = 4 * p;
  plan.optimizer_bytes = 8 * p;
  plan.state_bytes = 16 * p;
  plan.activation_bytes =
      activation_tokens * model.blocks * 2.0 * static_cast<double>(model.d_model + model.d_ff);
  plan.devices_for_state = std::ceil(plan.state_bytes / device_bytes);
  return plan;
}

double fsdp_bytes_per_device(const MemoryPlan& plan, int64_t n) {
  return (plan.state_bytes + plan.activation_bytes / 2) / static_cast<double>(n) +
         plan.activation_bytes / 2;
}

int64_t smallest_fsdp_degree(const MemoryPlan& plan, double device_bytes) {
  const double room = device_bytes - plan.activation_bytes / 2;
  if (room <= 0) return 0;
  return static_cast<int64_t>(std::ceil((plan.state_bytes + plan.activation_bytes / 2) / room));
}

MeshPlan mesh_plan(const FfnModel& model, int64_t x, int64_t y, double flops_per_s,
                   double bandwidth, double m_x, double m_y) {
  MeshPlan plan;
  plan.min_batch_per_device = flops_per_s / (bandwidth * m_x * static_cast<double>(y));
  plan.min_total_batch = plan.min_batch_per_device * static_cast<double>(x * y);
  plan.max_tp_degree = static_cast<double>(model.d_ff) * bandwidth * m_y / flops_per_s;
  plan.tp_compute_bound = static_cast<double>(y) <= plan.max_tp_degree;
  return plan;
}

double recommended_bucket_bytes(double gradient_bytes, double bandwidth, double overhead_s) {
  return std::sqrt(gradient_bytes * bandwidth * overhead_s);
}

double predicted_overhead_s(double gradient_bytes, double bandwidth, double overhead_s,
                            double bucket_bytes) {
  const double buckets = std::max(1.0, std::ceil(gradient_bytes / bucket_bytes));
  return gradient_bytes / (buckets * bandwidth) + buckets * overhead_s;
}

}  // namespace ddpd::plan
