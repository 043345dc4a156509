#include "worker_metrics.h"

#include "ddpd/service/metrics_endpoint.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <deque>
#include <functional>
#include <iterator>

namespace ddpd {
namespace {

using prometheus::Counter;
using prometheus::Gauge;
using prometheus::Histogram;
using prometheus::Labels;

// Step times from 1 ms (tiny on CPU) to 2 minutes (large models on few GPUs).
const Histogram::BucketBoundaries kStepBuckets{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                               0.5,   1,      2.5,   5,    10,    30,   120};

const char* const kPhases[] = {"forward", "backward",     "optimizer",
                               "comm",    "exposed_comm", "checkpoint"};
constexpr int kPhaseCount = static_cast<int>(std::size(kPhases));
const char* const kMemoryKinds[] = {"parameters", "gradients", "optimizer_state", "peak"};

}  // namespace

struct WorkerMetrics::Impl {
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  std::unique_ptr<MetricsEndpoint> endpoint;  // serves `registry`, which outlives it
  int retained_jobs = 4;

  prometheus::Family<Histogram>& step_duration =
      prometheus::BuildHistogram()
          .Name("ddpd_step_duration_seconds")
          .Help("Training step time per rank (warm-up steps included)")
          .Register(*registry);
  prometheus::Family<Gauge>& phase =
      prometheus::BuildGauge()
          .Name("ddpd_step_phase_seconds")
          .Help(
              "Last step's time by phase: forward, backward, optimizer, comm (collectives' "
              "span), exposed_comm (waiting on communication outside backward), checkpoint (the "
              "stall of a checkpoint saved after the step)")
          .Register(*registry);
  prometheus::Family<Counter>& phase_total =
      prometheus::BuildCounter()
          .Name("ddpd_step_phase_seconds_total")
          .Help("Sum over steps of ddpd_step_phase_seconds, by phase")
          .Register(*registry);
  prometheus::Family<Gauge>& comm_fraction =
      prometheus::BuildGauge()
          .Name("ddpd_comm_fraction")
          .Help("Last step's exposed communication time / step time")
          .Register(*registry);
  prometheus::Family<Gauge>& loss = prometheus::BuildGauge()
                                        .Name("ddpd_loss")
                                        .Help("Last step's loss (mean over ranks)")
                                        .Register(*registry);
  prometheus::Family<Gauge>& eval_loss =
      prometheus::BuildGauge()
          .Name("ddpd_eval_loss")
          .Help("Last held-out loss (--eval-data, mean over ranks)")
          .Register(*registry);
  prometheus::Family<Gauge>& tokens = prometheus::BuildGauge()
                                          .Name("ddpd_tokens_per_second")
                                          .Help("Last step's global tokens / step time")
                                          .Register(*registry);
  prometheus::Family<Gauge>& spread =
      prometheus::BuildGauge()
          .Name("ddpd_param_spread")
          .Help("Last measured max over parameters of (max - min across ranks)")
          .Register(*registry);
  prometheus::Family<Counter>& steps = prometheus::BuildCounter()
                                           .Name("ddpd_steps_total")
                                           .Help("Steps finished")
                                           .Register(*registry);
  prometheus::Family<Gauge>& memory =
      prometheus::BuildGauge()
          .Name("ddpd_memory_bytes")
          .Help(
              "Bytes on this rank by kind (parameters, gradients, optimizer_state, peak: CUDA "
              "allocator peak or peak RSS) at point (after_init, before_step, after_step)")
          .Register(*registry);
  prometheus::Family<Gauge>& comm_time =
      prometheus::BuildGauge()
          .Name("ddpd_comm_time_seconds")
          .Help("Comm benchmark: slowest rank's mean iteration time")
          .Register(*registry);
  prometheus::Family<Gauge>& algbw = prometheus::BuildGauge()
                                         .Name("ddpd_comm_algbw_bytes_per_second")
                                         .Help("Comm benchmark: size / time")
                                         .Register(*registry);
  prometheus::Family<Gauge>& busbw = prometheus::BuildGauge()
                                         .Name("ddpd_comm_busbw_bytes_per_second")
                                         .Help("Comm benchmark: algbw times nccl-tests' bus factor")
                                         .Register(*registry);
  prometheus::Family<Gauge>& busy_family = prometheus::BuildGauge()
                                               .Name("ddpd_worker_busy")
                                               .Help("1 while the worker runs a job")
                                               .Register(*registry);
  prometheus::Family<Counter>& jobs_family = prometheus::BuildCounter()
                                                 .Name("ddpd_worker_jobs_total")
                                                 .Help("Jobs this worker ran, by kind and result")
                                                 .Register(*registry);
  Gauge& busy = busy_family.Add({});
  // The session with the coordinator and the reports kept for it (worker/report_log.h).
  Gauge& connected = prometheus::BuildGauge()
                         .Name("ddpd_worker_connected")
                         .Help("1 while the worker has a session with the coordinator")
                         .Register(*registry)
                         .Add({});
  Gauge& kept_bytes = prometheus::BuildGauge()
                          .Name("ddpd_worker_unacknowledged_report_bytes")
                          .Help("Step reports and results kept until the coordinator stores them")
                          .Register(*registry)
                          .Add({});
  Gauge& dropped = prometheus::BuildGauge()
                       .Name("ddpd_worker_dropped_reports")
                       .Help(
                           "Step reports dropped since start: the buffer (--report-buffer-mb) "
                           "was full")
                       .Register(*registry)
                       .Add({});

  // The current job's series, created at start; removed when the job falls out of retention.
  struct JobSeries {
    std::string kind;  // ddp | comm
    Labels labels;
    std::vector<std::function<void()>> removers;
    Histogram* step_duration = nullptr;
    Gauge* phase[kPhaseCount] = {};
    Counter* phase_total[kPhaseCount] = {};
    Gauge *comm_fraction = nullptr, *loss = nullptr, *tokens = nullptr, *spread = nullptr;
    Gauge* eval_loss = nullptr;  // created at the first evaluation
    Counter* steps = nullptr;
  };
  // Only the recording thread touches `jobs` (the class's thread contract); scrapes read the
  // registry, which prometheus-cpp guards.
  std::deque<JobSeries> jobs;

  template <typename T, typename... Args>
  T* add(JobSeries& job, prometheus::Family<T>& family, Labels extra, Args&&... args) {
    Labels labels = job.labels;
    labels.insert(extra.begin(), extra.end());
    T* metric = &family.Add(labels, std::forward<Args>(args)...);
    job.removers.push_back([&family, metric] { family.Remove(metric); });
    return metric;
  }

  JobSeries& start(const std::string& kind, Labels labels) {
    while (!jobs.empty() && static_cast<int>(jobs.size()) >= retained_jobs) {
      for (auto& remove : jobs.front().removers) remove();
      jobs.pop_front();
    }
    jobs.emplace_back();
    jobs.back().kind = kind;
    jobs.back().labels = std::move(labels);
    busy.Set(1);
    return jobs.back();
  }

  JobSeries* current() { return jobs.empty() ? nullptr : &jobs.back(); }
};

WorkerMetrics::WorkerMetrics(const WorkerMetricsOptions& options)
    : impl_(std::make_unique<Impl>()) {
  impl_->retained_jobs = std::max(1, options.retained_jobs);
  if (options.port <= 0) return;
  impl_->endpoint = std::make_unique<MetricsEndpoint>(
      options.bind_host, options.port,
      std::vector<std::weak_ptr<prometheus::Collectable>>{impl_->registry}, options.port_attempts);
}

WorkerMetrics::~WorkerMetrics() = default;

int WorkerMetrics::port() const { return impl_->endpoint ? impl_->endpoint->port() : 0; }

void WorkerMetrics::ddp_job_started(const std::string& job_id, int rank,
                                    const std::string& strategy, const std::string& transport) {
  auto& job = impl_->start("ddp", {{"job_id", job_id},
                                   {"rank", std::to_string(rank)},
                                   {"strategy", strategy},
                                   {"transport", transport}});
  Impl& m = *impl_;
  job.step_duration = m.add(job, m.step_duration, {}, kStepBuckets);
  for (int i = 0; i < kPhaseCount; ++i) {
    job.phase[i] = m.add(job, m.phase, {{"phase", kPhases[i]}});
    job.phase_total[i] = m.add(job, m.phase_total, {{"phase", kPhases[i]}});
  }
  job.comm_fraction = m.add(job, m.comm_fraction, {});
  job.tokens = m.add(job, m.tokens, {});
  job.spread = m.add(job, m.spread, {});
  job.steps = m.add(job, m.steps, {});
}

void WorkerMetrics::comm_job_started(const std::string& job_id, int rank,
                                     const std::string& transport) {
  impl_->start("comm",
               {{"job_id", job_id}, {"rank", std::to_string(rank)}, {"transport", transport}});
}

void WorkerMetrics::record_step(const StepMetrics& s) {
  auto* job = impl_->current();
  if (!job || !job->step_duration) return;
  job->step_duration->Observe(s.step_seconds);
  const double phases[kPhaseCount] = {s.forward_seconds,      s.backward_seconds,
                                      s.optimizer_seconds,    s.comm_seconds,
                                      s.exposed_comm_seconds, s.checkpoint_seconds};
  for (int i = 0; i < kPhaseCount; ++i) {
    job->phase[i]->Set(phases[i]);
    job->phase_total[i]->Increment(phases[i]);
  }
  job->comm_fraction->Set(s.comm_fraction);
  // Created at the first step: a 0 before any would read as a perfect loss.
  if (!job->loss) job->loss = impl_->add(*job, impl_->loss, {});
  job->loss->Set(s.loss);
  job->tokens->Set(s.tokens_per_second);
  if (s.param_spread) job->spread->Set(*s.param_spread);
  if (s.eval_loss) {
    if (!job->eval_loss) job->eval_loss = impl_->add(*job, impl_->eval_loss, {});
    job->eval_loss->Set(*s.eval_loss);
  }
  job->steps->Increment();
}

void WorkerMetrics::record_memory(const MemoryProfile& profile, bool final_points) {
  auto* job = impl_->current();
  if (!job) return;
  auto record = [&](const char* point, const MemoryBytes& bytes) {
    const int64_t values[4] = {bytes.param_bytes, bytes.grad_bytes, bytes.optimizer_state_bytes,
                               bytes.peak_bytes};
    for (int i = 0; i < 4; ++i) {
      impl_->add(*job, impl_->memory, {{"kind", kMemoryKinds[i]}, {"point", point}})
          ->Set(static_cast<double>(values[i]));
    }
  };
  if (!final_points) {
    record("after_init", profile.after_init);
  } else {
    record("before_step", profile.before_step);
    record("after_step", profile.after_step);
    // memory.step_peak_tensor_bytes: the allocator's count, what `ddpctl plan memory` predicts.
    impl_->add(*job, impl_->memory, {{"kind", "tensors_peak"}, {"point", "last_step"}})
        ->Set(static_cast<double>(profile.step_peak_tensor_bytes));
    // memory.step_peak_activation_bytes (docs/metrics.md#memory).
    impl_->add(*job, impl_->memory, {{"kind", "activations_peak"}, {"point", "last_step"}})
        ->Set(static_cast<double>(profile.step_peak_activation_bytes));
  }
}

void WorkerMetrics::record_comm(const CommBenchResult& result) {
  auto* job = impl_->current();
  if (!job) return;
  for (const auto& row : result.rows) {
    const Labels labels{{"collective", enum_name(row.collective)},
                        {"size_bytes", std::to_string(row.size_bytes)},
                        {"world_size", std::to_string(result.world_size)}};
    impl_->add(*job, impl_->comm_time, labels)->Set(row.time_s);
    impl_->add(*job, impl_->algbw, labels)->Set(row.algbw_bytes_per_s);
    impl_->add(*job, impl_->busbw, labels)->Set(row.busbw_bytes_per_s);
  }
}

void WorkerMetrics::job_finished(bool succeeded) {
  const std::string kind = impl_->current() ? impl_->current()->kind : "unknown";
  impl_->jobs_family.Add({{"kind", kind}, {"result", succeeded ? "succeeded" : "failed"}})
      .Increment();
  impl_->busy.Set(0);
}

void WorkerMetrics::record_session(bool connected, int64_t kept_bytes, int64_t dropped) {
  impl_->connected.Set(connected ? 1 : 0);
  impl_->kept_bytes.Set(static_cast<double>(kept_bytes));
  impl_->dropped.Set(static_cast<double>(dropped));
}

}  // namespace ddpd
