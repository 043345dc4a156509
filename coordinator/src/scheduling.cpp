#include "scheduling.h"

#include <algorithm>

#include "ddpd/api/spec_convert.h"

namespace ddpd::coordinator {

bool transition_allowed(v1::JobState from, v1::JobState to) {
  switch (from) {
    case v1::PENDING:
      return to == v1::RUNNING || to == v1::FAILED || to == v1::CANCELLED;
    case v1::RUNNING:  // back to PENDING: an automatic restart
      return to == v1::SUCCEEDED || to == v1::FAILED || to == v1::CANCELLED || to == v1::PENDING;
    default:
      return false;
  }
}

Backend required_backend(const v1::JobSpec& spec, const DdpJobOptions& ddp) {
  if (spec.has_comm()) {
    // Only the backend: a spec stored by another build may name what this one cannot parse.
    try {
      return spec.comm().backend().empty() ? Backend::kGloo
                                           : parse_enum<Backend>(spec.comm().backend());
    } catch (const OptionError&) {
      return Backend::kGloo;  // validated at submit; as before, anything but nccl is gloo
    }
  }
  return ddp.device == Device::kCuda ? Backend::kNccl : Backend::kGloo;
}

std::vector<Backend> offered_backends(const std::vector<std::string>& names) {
  if (names.empty()) return {Backend::kGloo};
  std::vector<Backend> offered;
  const auto& known = EnumInfo<Backend>::names();
  for (const auto& name : names) {
    const auto it = std::find(known.begin(), known.end(), name);
    if (it != known.end()) offered.push_back(static_cast<Backend>(it - known.begin()));
  }
  return offered;
}

namespace {

bool offers(const IdleWorker& worker, Backend backend) {
  return std::find(worker.backends.begin(), worker.backends.end(), backend) !=
         worker.backends.end();
}

}  // namespace

namespace {

int count_offering(const std::vector<IdleWorker>& workers, Backend backend) {
  int n = 0;
  for (const auto& worker : workers) n += offers(worker, backend);
  return n;
}

std::optional<Placement> place_on_idle(const PendingJob& next,
                                       const std::vector<IdleWorker>& idle_workers) {
  Placement placement;
  placement.job_id = next.job_id;
  for (const auto& worker : idle_workers) {
    if (offers(worker, next.backend)) placement.worker_ids.push_back(worker.worker_id);
    if (static_cast<int>(placement.worker_ids.size()) == next.world_size) return placement;
  }
  for (int size : next.fallback_sizes) {
    if (size >= 1 && size <= static_cast<int>(placement.worker_ids.size())) {
      placement.worker_ids.resize(size);
      return placement;
    }
  }
  return std::nullopt;
}

}  // namespace

bool fits_registered(const PendingJob& job, const std::vector<IdleWorker>& registered) {
  int smallest = job.world_size;
  for (int size : job.fallback_sizes) {
    if (size >= 1) smallest = std::min(smallest, size);
  }
  return count_offering(registered, job.backend) >= smallest;
}

std::optional<Placement> place_next(const std::vector<PendingJob>& pending_in_order,
                                    const std::vector<IdleWorker>& idle_workers,
                                    const std::vector<IdleWorker>& registered) {
  for (const PendingJob& job : pending_in_order) {
    if (auto placement = place_on_idle(job, idle_workers)) return placement;
    if (fits_registered(job, registered)) return std::nullopt;  // it blocks the jobs behind it
  }
  return std::nullopt;
}

std::string pending_reason(const std::vector<PendingJob>& pending_in_order, size_t index,
                           const std::vector<IdleWorker>& registered,
                           const std::vector<IdleWorker>& idle_workers) {
  const PendingJob& job = pending_in_order[index];
  const bool fits = fits_registered(job, registered);
  for (size_t ahead = 0; fits && ahead < index; ++ahead) {
    if (fits_registered(pending_in_order[ahead], registered)) {
      return "queued behind " + pending_in_order[ahead].job_id;
    }
  }
  const std::string backend = enum_name(job.backend);
  std::string reason = "waiting for " + std::to_string(job.world_size) + " idle workers offering " +
                       backend + ": " + std::to_string(registered.size()) + " registered, " +
                       std::to_string(count_offering(idle_workers, job.backend)) + " idle";
  if (!fits) {
    reason += "; never fits the " + std::to_string(count_offering(registered, job.backend)) +
              " registered workers offering " + backend + ": later jobs that fit start first";
  }
  return reason;
}

v1::StepReport aggregate_step(const std::vector<v1::StepReport>& ranks) {
  v1::StepReport out;
  if (ranks.empty()) return out;
  out.set_rank(-1);
  out.set_step(ranks.front().step());
  double loss = 0;
  for (const auto& r : ranks) {
    loss += r.loss() / ranks.size();
    out.set_step_seconds(std::max(out.step_seconds(), r.step_seconds()));
    out.set_forward_seconds(std::max(out.forward_seconds(), r.forward_seconds()));
    out.set_backward_seconds(std::max(out.backward_seconds(), r.backward_seconds()));
    out.set_optimizer_seconds(std::max(out.optimizer_seconds(), r.optimizer_seconds()));
    out.set_comm_seconds(std::max(out.comm_seconds(), r.comm_seconds()));
    out.set_exposed_comm_seconds(std::max(out.exposed_comm_seconds(), r.exposed_comm_seconds()));
    out.set_comm_fraction(std::max(out.comm_fraction(), r.comm_fraction()));
    if (r.has_eval_loss()) out.set_eval_loss(r.eval_loss());  // the same on every rank
    if (r.has_param_spread()) {
      out.set_param_spread(
          std::max(out.has_param_spread() ? out.param_spread() : 0.0, r.param_spread()));
    }
  }
  out.set_loss(loss);
  out.set_tokens_per_second(ranks.front().tokens_per_second() * ranks.front().step_seconds() /
                            std::max(out.step_seconds(), 1e-12));
  return out;
}

AdmissionBudget admission_budget(Device device, const std::vector<v1::WorkerHello>& registered) {
  // A CUDA rank's tensors live on its GPU: host memory says nothing about whether they fit.
  const bool on_gpu = device == Device::kCuda;
  AdmissionBudget budget{0, on_gpu ? "the largest registered worker's GPU memory"
                                   : "the largest registered worker's memory"};
  for (const auto& hello : registered) {
    budget.bytes = std::max(budget.bytes, on_gpu ? hello.gpu_memory_bytes() : hello.memory_bytes());
  }
  return budget;
}

}  // namespace ddpd::coordinator
