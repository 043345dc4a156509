#include "coordinator_metrics.h"

#include "ddpd/service/metrics_endpoint.h"

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <iterator>
#include <map>
#include <mutex>

namespace ddpd::coordinator {
namespace {

const char* const kWorkerStates[] = {"IDLE", "BUSY", "LOST", "DISCONNECTED"};
const char* const kJobStates[] = {"PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"};

// Refreshes the state gauges from a snapshot, then collects the registry: state gauges are
// read when scraped instead of being kept in step with every transition.
class RefreshOnScrape final : public prometheus::Collectable {
 public:
  RefreshOnScrape(std::shared_ptr<prometheus::Registry> registry, std::function<void()> refresh)
      : registry_(std::move(registry)), refresh_(std::move(refresh)) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    std::lock_guard<std::mutex> lock(mutex_);  // two concurrent scrapes refresh in turn
    refresh_();
    return registry_->Collect();
  }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  std::function<void()> refresh_;
  mutable std::mutex mutex_;
};

class RpcCounter final : public grpc::experimental::Interceptor {
 public:
  RpcCounter(CoordinatorMetrics& metrics, const char* full_method) : metrics_(metrics) {
    const std::string name = full_method ? full_method : "";
    method_ = name.substr(name.rfind('/') + 1);  // "/ddpd.v1.Coordinator/SubmitJob" → SubmitJob
  }
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      metrics_.count_rpc(method_, methods->GetSendStatus().error_code());
    }
    methods->Proceed();
  }

 private:
  CoordinatorMetrics& metrics_;
  std::string method_;
};

class RpcCounterFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RpcCounterFactory(CoordinatorMetrics& metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new RpcCounter(metrics_, info->method());
  }

 private:
  CoordinatorMetrics& metrics_;
};

}  // namespace

std::string status_code_name(grpc::StatusCode code) {
  // go-grpc-prometheus' grpc_code values, so dashboards written for gRPC servers read ours.
  static const char* const kNames[] = {
      "OK",       "Canceled",       "Unknown",          "InvalidArgument",   "DeadlineExceeded",
      "NotFound", "AlreadyExists",  "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
      "Aborted",  "OutOfRange",     "Unimplemented",    "Internal",          "Unavailable",
      "DataLoss", "Unauthenticated"};
  const int index = static_cast<int>(code);
  if (index >= 0 && index < static_cast<int>(std::size(kNames))) return kNames[index];
  return "Code" + std::to_string(index);
}

struct CoordinatorMetrics::Impl {
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  std::function<StateCounts()> snapshot;
  prometheus::Family<prometheus::Gauge>& workers = prometheus::BuildGauge()
                                                       .Name("ddpd_coordinator_workers")
                                                       .Help("Registered workers by state")
                                                       .Register(*registry);
  prometheus::Family<prometheus::Gauge>& jobs = prometheus::BuildGauge()
                                                    .Name("ddpd_coordinator_jobs")
                                                    .Help("Jobs in the store by state")
                                                    .Register(*registry);
  prometheus::Gauge& queue_length = prometheus::BuildGauge()
                                        .Name("ddpd_coordinator_queue_length")
                                        .Help("Jobs pending, waiting for idle workers")
                                        .Register(*registry)
                                        .Add({});
  prometheus::Family<prometheus::Counter>& rpcs =
      prometheus::BuildCounter()
          .Name("ddpd_coordinator_rpcs_total")
          .Help("RPCs finished, by method and gRPC status code")
          .Register(*registry);
  prometheus::Counter& step_reports = prometheus::BuildCounter()
                                          .Name("ddpd_coordinator_step_reports_total")
                                          .Help("Per-rank step reports received")
                                          .Register(*registry)
                                          .Add({});
  // Buckets from 50 µs to 5 s: an idle coordinator handles a message in tens of µs; under load
  // the wait for the service's lock dominates.
  prometheus::Family<prometheus::Histogram>& messages =
      prometheus::BuildHistogram()
          .Name("ddpd_coordinator_message_seconds")
          .Help("Worker-session messages by kind: seconds from arrival to the end of handling")
          .Register(*registry);
  std::map<std::string, prometheus::Histogram*> message_by_kind;
  std::mutex message_mutex;  // message_by_kind (Family::Add is thread-safe, the map is not)
  prometheus::Family<prometheus::Gauge>& compute_score =
      prometheus::BuildGauge()
          .Name("ddpd_rank_compute_score")
          .Help(
              "Straggler score per rank: 1 / the median over the last 10 steps of this rank's "
              "compute time relative to the other ranks' median (1: as fast or faster)")
          .Register(*registry);
  std::map<std::pair<std::string, int>, prometheus::Gauge*> score_gauges;
  prometheus::Counter& heals = prometheus::BuildCounter()
                                   .Name("ddpd_coordinator_heals_total")
                                   .Help("Lost ranks replaced in place by an idle worker")
                                   .Register(*registry)
                                   .Add({});
  // Buckets from 0.25 s (a killed rank of a small model) to 2 min (a lost worker's timeout and a
  // large model's state).
  prometheus::Histogram& heal_seconds =
      prometheus::BuildHistogram()
          .Name("ddpd_coordinator_heal_seconds")
          .Help("Seconds from a lost rank seen to the healed group's first complete step")
          .Register(*registry)
          .Add({}, prometheus::Histogram::BucketBoundaries{0.25, 0.5, 1, 2, 5, 10, 30, 60, 120});
  int64_t heals_counted = 0;     // of StateCounts::heals_started, already in `heals`
  size_t heal_seconds_seen = 0;  // of StateCounts::heal_seconds, already observed
  std::shared_ptr<RefreshOnScrape> collectable;
  std::unique_ptr<MetricsEndpoint> endpoint;

  void refresh() {
    const StateCounts counts = snapshot();
    for (const char* state : kWorkerStates) {
      const auto it = counts.workers.find(state);
      workers.Add({{"state", state}}).Set(it == counts.workers.end() ? 0 : it->second);
    }
    for (const char* state : kJobStates) {
      const auto it = counts.jobs.find(state);
      jobs.Add({{"state", state}}).Set(it == counts.jobs.end() ? 0 : it->second);
    }
    queue_length.Set(counts.queue_length);
    for (auto it = score_gauges.begin(); it != score_gauges.end();) {
      if (counts.compute_scores.count(it->first)) {
        ++it;
      } else {
        compute_score.Remove(it->second);
        it = score_gauges.erase(it);
      }
    }
    for (const auto& [key, score] : counts.compute_scores) {
      auto& gauge = score_gauges[key];
      if (!gauge) {
        gauge = &compute_score.Add({{"job_id", key.first}, {"rank", std::to_string(key.second)}});
      }
      gauge->Set(score);
    }
    heals.Increment(static_cast<double>(counts.heals_started - heals_counted));
    heals_counted = counts.heals_started;
    for (; heal_seconds_seen < counts.heal_seconds.size(); ++heal_seconds_seen) {
      heal_seconds.Observe(counts.heal_seconds[heal_seconds_seen]);
    }
  }
};

CoordinatorMetrics::CoordinatorMetrics(const CoordinatorMetricsOptions& options,
                                       std::function<StateCounts()> snapshot)
    : impl_(std::make_unique<Impl>()) {
  impl_->snapshot = std::move(snapshot);
  if (options.port <= 0) return;
  impl_->collectable =
      std::make_shared<RefreshOnScrape>(impl_->registry, [impl = impl_.get()] { impl->refresh(); });
  impl_->endpoint = std::make_unique<MetricsEndpoint>(
      options.bind_host, options.port,
      std::vector<std::weak_ptr<prometheus::Collectable>>{impl_->collectable});
}

CoordinatorMetrics::~CoordinatorMetrics() {
  impl_->endpoint.reset();  // stop scrapes before the snapshot's owner goes away
}

void CoordinatorMetrics::count_rpc(const std::string& method, grpc::StatusCode code) {
  impl_->rpcs.Add({{"method", method}, {"code", status_code_name(code)}}).Increment();
}

void CoordinatorMetrics::count_step_report() { impl_->step_reports.Increment(); }

void CoordinatorMetrics::observe_message(const char* kind, double seconds) {
  prometheus::Histogram* histogram = nullptr;
  {
    std::lock_guard<std::mutex> lock(impl_->message_mutex);
    auto& slot = impl_->message_by_kind[kind];
    if (!slot) {
      slot = &impl_->messages.Add(
          {{"kind", kind}},
          prometheus::Histogram::BucketBoundaries{5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3,
                                                  1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1, 2.5, 5});
    }
    histogram = slot;
  }
  histogram->Observe(seconds);
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
CoordinatorMetrics::rpc_counter() {
  return std::make_unique<RpcCounterFactory>(*this);
}

}  // namespace ddpd::coordinator
