// ddpd-loadgen: the coordinator under N simulated workers (docs/scale.md). It opens N worker
// sessions over real gRPC, places one job of --placement-ranks ranks and times it, fills the
// other workers with jobs of --min-ranks..--max-ranks ranks, streams step reports for
// --seconds, then finishes the jobs, optionally fills the history with --history-jobs
// one-rank jobs and times ListJobs and GetJob. Figures come from the coordinator's own
// /metrics (handling-time histograms, step reports counted) and, when the loadgen started the
// coordinator itself, from /proc (CPU, RSS) and its SQLite files.
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "ddpd/common/net.h"
#include "ddpd/common/seconds_since.h"
#include "process_usage.h"
#include "simulated_workers.h"
#include "support/http.h"
#include "support/process.h"

namespace {

using Clock = std::chrono::steady_clock;

using ddpd::seconds_since;

struct LoadgenOptions {
  ddpd::load::SimulatedWorkersOptions workers;
  double seconds = 10;
  int placement_ranks = 256;
  int min_ranks = 64, max_ranks = 256;
  int history_jobs = 0;
  int metrics_port = 0;  // of --coordinator (0: no histogram figures)
  bool json = false;
};

// A histogram's quantile from its cumulative buckets, interpolated linearly within a bucket.
double quantile(const std::vector<std::pair<double, double>>& buckets, double q) {
  if (buckets.empty() || buckets.back().second <= 0) return 0;
  const double target = q * buckets.back().second;
  double low = 0, below = 0;
  for (const auto& [le, count] : buckets) {
    if (count >= target) {
      if (std::isinf(le)) return low;
      return low + (le - low) * (count > below ? (target - below) / (count - below) : 0);
    }
    low = le;
    below = count;
  }
  return low;
}

struct Scrape {
  std::map<std::string, std::vector<std::pair<double, double>>> histogram;  // kind → buckets
  double step_reports_total = 0;
};

Scrape scrape(int port) {
  Scrape out;
  if (port <= 0) return out;
  const auto reply = ddpd::testing::http_get(port, "/metrics");
  std::istringstream lines(reply.body);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("ddpd_coordinator_step_reports_total ", 0) == 0) {
      out.step_reports_total = std::stod(line.substr(line.find(' ') + 1));
    }
    if (line.rfind("ddpd_coordinator_message_seconds_bucket{", 0) != 0) continue;
    const auto kind_at = line.find("kind=\"") + 6;
    const std::string kind = line.substr(kind_at, line.find('"', kind_at) - kind_at);
    const auto le_at = line.find("le=\"") + 4;
    const std::string le = line.substr(le_at, line.find('"', le_at) - le_at);
    const double bound = le == "+Inf" ? INFINITY : std::stod(le);
    out.histogram[kind].emplace_back(bound, std::stod(line.substr(line.rfind(' ') + 1)));
  }
  return out;
}

using ddpd::load::ProcessUsage;
using ddpd::load::usage_of;

int64_t file_bytes(const std::string& path) {
  std::error_code error;
  const auto size = std::filesystem::file_size(path, error);
  return error ? 0 : static_cast<int64_t>(size);
}

// ListJobs answers with the whole history: let it be as large as it gets.
grpc::ChannelArguments unlimited_receive() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  return args;
}

class Control {
 public:
  Control(const std::string& address, const std::string& token)
      : stub_(ddpd::v1::Coordinator::NewStub(grpc::CreateCustomChannel(
            address, grpc::InsecureChannelCredentials(), unlimited_receive()))),
        token_(token) {}

  // A DDP job of `ranks` ranks that runs (simulated) until finish_jobs; steps 1: a history job.
  std::string submit(int ranks, int64_t steps) {
    ddpd::v1::SubmitJobRequest request;
    request.mutable_spec()->set_world_size(ranks);
    auto* ddp = request.mutable_spec()->mutable_ddp();
    ddp->set_model("tiny");
    ddp->set_batch_size(ranks);
    ddp->set_steps(steps);
    ddp->set_stall_seconds(0);
    ddp->set_straggler_threshold(0);
    ddpd::v1::Job reply;
    grpc::ClientContext context;
    authorize(context);
    const auto status = stub_->SubmitJob(&context, request, &reply);
    if (!status.ok()) throw std::runtime_error("SubmitJob: " + status.error_message());
    return reply.job_id();
  }

  // Seconds of one call, and what it returned.
  double list_seconds(size_t* jobs) {
    grpc::ClientContext context;
    authorize(context);
    ddpd::v1::ListJobsReply reply;
    const auto start = Clock::now();
    const auto status = stub_->ListJobs(&context, {}, &reply);
    const double seconds = seconds_since(start);
    if (!status.ok()) throw std::runtime_error("ListJobs: " + status.error_message());
    *jobs = reply.jobs_size();
    return seconds;
  }
  double show_seconds(const std::string& job) {
    grpc::ClientContext context;
    authorize(context);
    ddpd::v1::GetJobRequest request;
    request.set_job_id(job);
    request.set_with_steps(true);
    ddpd::v1::GetJobReply reply;
    const auto start = Clock::now();
    const auto status = stub_->GetJob(&context, request, &reply);
    const double seconds = seconds_since(start);
    if (!status.ok()) throw std::runtime_error("GetJob: " + status.error_message());
    return seconds;
  }

 private:
  void authorize(grpc::ClientContext& context) {
    if (!token_.empty()) context.AddMetadata("authorization", "Bearer " + token_);
  }
  std::unique_ptr<ddpd::v1::Coordinator::Stub> stub_;
  std::string token_;
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0 : values[values.size() / 2];
}

bool wait_until(const std::function<bool()>& done, double seconds) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
}

nlohmann::json run(LoadgenOptions o) {
  // Without --coordinator: our own, on free ports, with a fresh database.
  std::unique_ptr<ddpd::testing::BackgroundProcess> own;
  std::string db;
  if (o.workers.coordinator.empty()) {
    const int port = ddpd::free_port();
    o.metrics_port = ddpd::free_port();
    db = ddpd::testing::temp_dir() + "/loadgen-coordinator.db";  // removed at exit
    const std::string self = std::filesystem::read_symlink("/proc/self/exe").parent_path();
    o.workers.coordinator = "127.0.0.1:" + std::to_string(port);
    // Our own coordinator needs a token (it refuses to start without one).
    if (o.workers.token.empty()) o.workers.token = "loadgen-" + std::to_string(getpid());
    own = std::make_unique<ddpd::testing::BackgroundProcess>(
        std::vector<std::string>{self + "/ddpd-coordinator", "--listen", o.workers.coordinator,
                                 "--db", db, "--metrics-port", std::to_string(o.metrics_port),
                                 "--metrics-host", "127.0.0.1", "--log-level", "warn",
                                 "--worker-timeout", "60"},
        std::map<std::string, std::string>{{"DDPD_TOKEN", o.workers.token}}, "loadgen-coordinator");
    if (!ddpd::wait_for_port("127.0.0.1", port, std::chrono::seconds(30))) {
      throw std::runtime_error("the coordinator did not start:\n" + own->log());
    }
  }
  nlohmann::json out{{"workers", o.workers.workers}, {"seconds", o.seconds}};
  const auto before = own ? usage_of(own->pid()) : ProcessUsage{};

  const auto connect_start = Clock::now();
  ddpd::load::SimulatedWorkers workers(o.workers);
  if (!wait_until([&] { return workers.welcomed() == o.workers.workers; }, 120)) {
    throw std::runtime_error(std::to_string(workers.welcomed()) + " of " +
                             std::to_string(o.workers.workers) + " sessions welcomed in 120 s");
  }
  out["connect_all_seconds"] = seconds_since(connect_start);
  Control control(o.workers.coordinator, o.workers.token);

  // Placement of one large job, from SubmitJob to its last rank's Assignment.
  int placed = 0;
  if (o.placement_ranks > 0 && o.placement_ranks <= o.workers.workers) {
    const auto start = Clock::now();
    const std::string job = control.submit(o.placement_ranks, 1000000000);
    wait_until([&] { return workers.assigned(job) == o.placement_ranks; }, 60);
    out["place_job_ranks"] = o.placement_ranks;
    out["place_job_ms"] = 1e3 * seconds_since(start);
    placed += o.placement_ranks;
  }
  // The rest of the workers in jobs of min..max ranks.
  int jobs = placed > 0 ? 1 : 0;
  for (int size = o.max_ranks; o.workers.workers - placed >= o.min_ranks;) {
    size = std::min(size, o.workers.workers - placed);
    if (size < o.min_ranks) break;
    control.submit(size, 1000000000);
    placed += size;
    ++jobs;
    size = size == o.min_ranks ? o.max_ranks : std::max(o.min_ranks, size / 2);
  }
  wait_until([&] { return workers.assigned() == placed; }, 60);
  out["jobs_running"] = jobs;
  out["ranks_assigned"] = workers.assigned();

  // The measured window: every assigned session streams step reports.
  const Scrape first = scrape(o.metrics_port);
  const auto usage_start = own ? usage_of(own->pid()) : ProcessUsage{};
  const int64_t sent_start = workers.step_reports_sent();
  std::this_thread::sleep_for(std::chrono::duration<double>(o.seconds));
  workers.pause_steps();
  const int64_t sent = workers.step_reports_sent() - sent_start;
  // Let the coordinator drain what is in flight before counting what it stored.
  double stored = 0;
  wait_until(
      [&] {
        stored = scrape(o.metrics_port).step_reports_total - first.step_reports_total;
        return o.metrics_port <= 0 || stored >= static_cast<double>(sent);
      },
      60);
  const double window = o.seconds;
  const auto usage_end = own ? usage_of(own->pid()) : ProcessUsage{};
  const Scrape last = scrape(o.metrics_port);
  out["step_reports_sent"] = sent;
  out["step_reports_sent_per_second"] = static_cast<double>(sent) / window;
  if (o.metrics_port > 0) {
    out["step_reports_handled"] = stored;
    out["step_reports_per_second"] = stored / window;
    for (const auto& [kind, key] :
         std::map<std::string, std::string>{{"heartbeat", "heartbeat"}, {"step", "step_report"}}) {
      // The window's own observations: last minus first, bucket by bucket.
      auto buckets = last.histogram.count(kind) ? last.histogram.at(kind)
                                                : std::vector<std::pair<double, double>>{};
      const auto& earlier =
          first.histogram.count(kind) ? first.histogram.at(kind) : decltype(buckets){};
      for (size_t b = 0; b < buckets.size() && b < earlier.size(); ++b) {
        buckets[b].second -= earlier[b].second;
      }
      out[key + "_p50_ms"] = 1e3 * quantile(buckets, 0.5);
      out[key + "_p99_ms"] = 1e3 * quantile(buckets, 0.99);
      out[key + "_count"] = buckets.empty() ? 0.0 : buckets.back().second;
    }
  }
  if (own) {
    out["coordinator_cpu_percent"] =
        100 * (usage_end.cpu_seconds - usage_start.cpu_seconds) / window;
    out["coordinator_rss_bytes"] = usage_end.rss_bytes;
    out["coordinator_peak_rss_bytes"] = usage_end.peak_rss_bytes;
    out["coordinator_rss_before_sessions_bytes"] = before.rss_bytes;
  }
  // History: finish the running jobs, then one-rank jobs that end at once.
  workers.finish_jobs();
  if (o.history_jobs > 0) {
    const auto start = Clock::now();
    std::string last_job;
    for (int j = 0; j < o.history_jobs; ++j) last_job = control.submit(1, 1);
    out["history_submit_per_second"] = o.history_jobs / seconds_since(start);
    wait_until([&] { return workers.assigned() == 0; }, 30);
    std::vector<double> list, show;
    size_t listed = 0;
    for (int k = 0; k < 5; ++k) {
      list.push_back(control.list_seconds(&listed));
      show.push_back(control.show_seconds(last_job));
    }
    out["history_jobs"] = listed;
    out["list_ms"] = 1e3 * median(list);
    out["show_ms"] = 1e3 * median(show);
  }
  // Every step report of the run, sent and handled (the coordinator counts from its start, so
  // these compare only when the loadgen started it).
  out["step_reports_sent_total"] = workers.step_reports_sent();
  if (own) {
    out["step_reports_handled_total"] = scrape(o.metrics_port).step_reports_total;
    // The store once the coordinator has closed it (its WAL checkpointed into the file): every
    // table, so an upper bound for the step reports' share.
    own->signal(SIGTERM);
    own->wait(std::chrono::seconds(30));
    const int64_t bytes = file_bytes(db);
    out["sqlite_bytes"] = bytes;
    out["sqlite_bytes_per_million_step_reports"] =
        1e6 * static_cast<double>(bytes) /
        std::max(1.0, out["step_reports_handled_total"].get<double>());
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ddpd-loadgen: the coordinator under simulated workers (docs/scale.md)"};
  LoadgenOptions o;
  o.workers.coordinator.clear();
  app.add_option("--workers", o.workers.workers, "Simulated worker sessions")
      ->capture_default_str();
  app.add_option("--seconds", o.seconds, "Length of the measured window")->capture_default_str();
  app.add_option("--coordinator", o.workers.coordinator,
                 "host:port of a running coordinator (default: start one)");
  app.add_option("--metrics-port", o.metrics_port,
                 "/metrics port of --coordinator, for the handling-time figures");
  app.add_option("--token", o.workers.token, "Control-plane token (default: $DDPD_TOKEN)");
  app.add_option("--heartbeat-seconds", o.workers.heartbeat_seconds, "Heartbeat interval")
      ->capture_default_str();
  app.add_option("--step-rate", o.workers.step_reports_per_second,
                 "Step reports per second per assigned worker")
      ->capture_default_str();
  app.add_option("--placement-ranks", o.placement_ranks, "Ranks of the timed placement (0: none)")
      ->capture_default_str();
  app.add_option("--min-ranks", o.min_ranks, "Smallest job")->capture_default_str();
  app.add_option("--max-ranks", o.max_ranks, "Largest job")->capture_default_str();
  app.add_option("--history-jobs", o.history_jobs,
                 "One-rank jobs added to the history before timing list and show")
      ->capture_default_str();
  app.add_flag("--json", o.json, "Print the figures as JSON");
  try {
    app.parse(argc, argv);
    if (o.workers.workers < 1) throw CLI::ValidationError("--workers", "must be >= 1");
    if (o.seconds <= 0) throw CLI::ValidationError("--seconds", "must be > 0");
    if (o.min_ranks < 1 || o.max_ranks < o.min_ranks) {
      throw CLI::ValidationError("--min-ranks", "must be >= 1 and <= --max-ranks");
    }
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (o.workers.token.empty()) {
    if (const char* env = std::getenv("DDPD_TOKEN")) o.workers.token = env;
  }
  try {
    const auto figures = run(o);
    if (o.json) {
      std::cout << figures.dump() << std::endl;
    } else {
      for (const auto& [key, value] : figures.items()) {
        std::cout << key << ": " << value.dump() << "\n";
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
