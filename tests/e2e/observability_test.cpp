// Observability end to end, with real daemons: /metrics on the coordinator and the workers,
// scraped by a real Prometheus server running the shipped config; the Grafana dashboard's
// queries checked against what the daemons export; JSON logs; per-rank timelines.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

#include "e2e/cluster.h"
#include "support/http.h"
#include "support/process.h"

namespace ddpd::testing {
namespace {

const std::string kSource = DDPD_SOURCE_DIR;

bool executable(const std::string& path) { return access(path.c_str(), X_OK) == 0; }

// Samples of a Prometheus text exposition: "name{labels}" → value.
std::map<std::string, double> parse_exposition(const std::string& text) {
  std::map<std::string, double> samples;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    samples[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return samples;
}

std::string sample_name(const std::string& key) { return key.substr(0, key.find('{')); }

// The one sample whose key has `name` and contains every `label="value"` fragment.
std::optional<double> sample(const std::map<std::string, double>& samples, const std::string& name,
                             const std::vector<std::string>& fragments) {
  std::optional<double> found;
  for (const auto& [key, value] : samples) {
    if (sample_name(key) != name) continue;
    bool all = true;
    for (const auto& f : fragments) all = all && key.find(f) != std::string::npos;
    if (!all) continue;
    EXPECT_FALSE(found.has_value()) << "more than one sample matches " << name;
    found = value;
  }
  return found;
}

std::map<std::string, double> scrape(int port) {
  const auto reply = http_get(port, "/metrics");
  EXPECT_EQ(reply.status, 200) << "GET 127.0.0.1:" << port << "/metrics";
  return parse_exposition(reply.body);
}

// Every string in the dashboard where a PromQL query lives (panel targets, template queries).
void collect_queries(const nlohmann::json& node, std::vector<std::string>& out) {
  if (node.is_object()) {
    for (const auto& [key, value] : node.items()) {
      if ((key == "expr" || key == "query" || key == "definition") && value.is_string()) {
        out.push_back(value.get<std::string>());
      }
      collect_queries(value, out);
    }
  } else if (node.is_array()) {
    for (const auto& item : node) collect_queries(item, out);
  }
}

// A Prometheus server with deploy/prometheus/prometheus.yml, on a free port.
class PrometheusServer {
 public:
  PrometheusServer() : port_(unused_port()) {
    const std::string data = temp_dir() + "/prometheus-data-" + std::to_string(port_);
    process_ = std::make_unique<BackgroundProcess>(
        std::vector<std::string>{"/usr/bin/prometheus",
                                 "--config.file=" + kSource + "/deploy/prometheus/prometheus.yml",
                                 "--storage.tsdb.path=" + data,
                                 "--web.listen-address=127.0.0.1:" + std::to_string(port_)},
        std::map<std::string, std::string>{}, "prometheus");
  }

  // Instant query; returns the "result" array (empty when Prometheus is not up yet).
  nlohmann::json query(const std::string& promql) {
    const auto reply = http_get(port_, "/api/v1/query?query=" + url_encode(promql));
    if (reply.status != 200) return nlohmann::json::array();
    const auto body = nlohmann::json::parse(reply.body, nullptr, false);
    if (body.is_discarded() || body.value("status", "") != "success") {
      return nlohmann::json::array();
    }
    return body["data"]["result"];
  }

  // Polls `promql` until `ready(result)` or `timeout`; prints the query and its last result.
  nlohmann::json query_until(const std::string& promql,
                             const std::function<bool(const nlohmann::json&)>& ready,
                             std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    nlohmann::json result;
    do {
      result = query(promql);
      if (ready(result)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    } while (std::chrono::steady_clock::now() < deadline);
    std::cout << "PromQL: " << promql << "\n  → " << result.dump() << std::endl;
    return result;
  }

  std::string log() const { return process_->log(); }

 private:
  int port_;
  std::unique_ptr<BackgroundProcess> process_;
};

double value_of(const nlohmann::json& series) {
  return std::stod(series["value"][1].get<std::string>());
}

TEST(Observability, PromtoolAcceptsTheShippedConfig) {
  if (!executable("/usr/bin/promtool")) GTEST_SKIP() << "promtool not installed (scripts/setup.sh)";
  for (const char* config : {"prometheus.yml", "compose.yml"}) {
    const auto o = run_process(
        {"/usr/bin/promtool", "check", "config", kSource + "/deploy/prometheus/" + config}, {},
        std::chrono::seconds(60));
    EXPECT_EQ(o.exit_code, 0) << config << ": " << o.out << o.err;
    EXPECT_NE((o.out + o.err).find("SUCCESS"), std::string::npos)
        << config << ": " << o.out << o.err;
  }
}

// The acceptance path: the shipped config's targets (coordinator 9400, workers 9401+), a 2-rank
// job, and Prometheus' HTTP API returning its step time and comm fraction from both ranks.
TEST(Observability, PrometheusFindsStepTimeAndCommFractionOfBothRanks) {
  if (!executable("/usr/bin/prometheus")) {
    GTEST_SKIP() << "prometheus not installed (scripts/setup.sh installs Debian's)";
  }
  Cluster cluster(2, "prom", {"--metrics-port", "9400"}, [](int i) {
    return std::vector<std::string>{"--metrics-port", std::to_string(9401 + i)};
  });
  PrometheusServer prometheus;
  const std::string job = cluster.submit({"--steps", "12", "--strategy", "bucketed"});
  const auto watch = cluster.ctl({"watch", job});
  ASSERT_EQ(watch.exit_code, 0) << watch.out << watch.err;
  const std::string sel = "{job_id=\"" + job + "\"}";

  auto both_ranks = [](const nlohmann::json& result) { return result.size() == 2; };
  const auto counts = prometheus.query_until(
      "ddpd_step_duration_seconds_count" + sel,
      [](const nlohmann::json& r) {
        return r.size() == 2 && value_of(r[0]) == 12 && value_of(r[1]) == 12;
      },
      std::chrono::seconds(90));
  ASSERT_EQ(counts.size(), 2u) << prometheus.log();
  std::set<std::string> ranks;
  for (const auto& series : counts) {
    ranks.insert(series["metric"]["rank"].get<std::string>());
    EXPECT_EQ(series["metric"]["job"], "ddpd-worker");  // Prometheus' own job label is intact
    EXPECT_EQ(series["metric"]["strategy"], "bucketed");
    EXPECT_EQ(value_of(series), 12);
  }
  EXPECT_EQ(ranks, (std::set<std::string>{"0", "1"}));

  const auto mean_step = prometheus.query_until(
      "ddpd_step_duration_seconds_sum" + sel + " / ddpd_step_duration_seconds_count" + sel,
      both_ranks, std::chrono::seconds(30));
  ASSERT_EQ(mean_step.size(), 2u);
  for (const auto& series : mean_step) {
    EXPECT_GT(value_of(series), 0);
    EXPECT_LT(value_of(series), 60);
  }
  const auto fraction =
      prometheus.query_until("ddpd_comm_fraction" + sel, both_ranks, std::chrono::seconds(30));
  ASSERT_EQ(fraction.size(), 2u);
  for (const auto& series : fraction) {
    EXPECT_GE(value_of(series), 0);
    EXPECT_LE(value_of(series), 1);
  }
  // The last step's comm fraction equals what the worker reported to the coordinator.
  const auto shown = cluster.show(job);
  for (const auto& series : fraction) {
    const int rank = std::stoi(series["metric"]["rank"].get<std::string>());
    for (const auto& s : shown["rank_steps"]) {
      if (s["rank"] == rank && s["step"] == 11) {
        EXPECT_NEAR(value_of(series), s["comm_fraction"].get<double>(), 1e-9);
      }
    }
  }
  const auto succeeded = prometheus.query_until(
      "ddpd_coordinator_jobs{state=\"SUCCEEDED\"}",
      [](const nlohmann::json& r) { return r.size() == 1 && value_of(r[0]) == 1; },
      std::chrono::seconds(30));
  ASSERT_EQ(succeeded.size(), 1u);
  EXPECT_EQ(value_of(succeeded[0]), 1);
  const auto idle = prometheus.query_until(
      "ddpd_coordinator_workers{state=\"IDLE\"}",
      [](const nlohmann::json& r) { return r.size() == 1 && value_of(r[0]) == 2; },
      std::chrono::seconds(30));
  ASSERT_EQ(idle.size(), 1u);
  EXPECT_EQ(value_of(idle[0]), 2);
  const auto submits = prometheus.query_until(
      "ddpd_coordinator_rpcs_total{method=\"SubmitJob\",code=\"OK\"}",
      [](const nlohmann::json& r) { return r.size() == 1; }, std::chrono::seconds(30));
  ASSERT_EQ(submits.size(), 1u);
  EXPECT_EQ(value_of(submits[0]), 1);

  // Every panel of the Grafana dashboard, as Grafana would send it (variables = all): valid
  // PromQL that returns series once a DDP job and a comm job have run.
  auto comm = cluster.ctl({"submit", "comm", "--world-size", "2", "--sizes", "64KB,1MB", "--warmup",
                           "1", "--iters", "2", "--watch"});
  ASSERT_EQ(comm.exit_code, 0) << comm.err;
  std::ifstream file(kSource + "/deploy/grafana/dashboards/ddpd.json");
  const auto dashboard = nlohmann::json::parse(file);
  int panels_checked = 0;
  for (const auto& panel : dashboard["panels"]) {
    for (const auto& target : panel["targets"]) {
      std::string expr = target["expr"];
      for (const std::string variable : {"$job", "$rank"}) {
        for (size_t at; (at = expr.find(variable)) != std::string::npos;) {
          expr.replace(at, variable.size(), ".*");
        }
      }
      const auto result = prometheus.query_until(
          expr, [](const nlohmann::json& r) { return !r.empty(); }, std::chrono::seconds(30));
      EXPECT_FALSE(result.empty()) << panel["title"] << ": " << expr;
    }
    ++panels_checked;
  }
  EXPECT_GE(panels_checked, 12);
}

// Every metric the Grafana dashboard queries is one the daemons export (after a DDP job and a
// comm job), and the exported values are the job's own figures.
TEST(Observability, DashboardQueriesOnlyExportedMetrics) {
  const int coordinator_port = unused_port();
  std::vector<int> worker_ports{unused_port(), unused_port()};
  Cluster cluster(2, "dash", {"--metrics-port", std::to_string(coordinator_port)}, [&](int i) {
    return std::vector<std::string>{"--metrics-port", std::to_string(worker_ports[i])};
  });
  const std::string ddp_job = cluster.submit({"--steps", "3", "--strategy", "flat"});
  ASSERT_EQ(cluster.ctl({"watch", ddp_job}).exit_code, 0);
  auto comm = cluster.ctl({"submit", "comm", "--world-size", "2", "--sizes", "64KB,1MB", "--warmup",
                           "1", "--iters", "2", "--watch"});
  ASSERT_EQ(comm.exit_code, 0) << comm.out << comm.err;
  const std::string comm_job = comm.out.substr(0, comm.out.find('\n'));

  EXPECT_NE(cluster.ctl({"list"}, "wrong-token").exit_code, 0);  // refused, and counted

  std::map<std::string, double> all = scrape(coordinator_port);
  EXPECT_EQ(sample(all, "ddpd_coordinator_rpcs_total",
                   {"method=\"ListJobs\"", "code=\"Unauthenticated\""}),
            1.0);
  EXPECT_EQ(sample(all, "ddpd_coordinator_rpcs_total", {"method=\"SubmitJob\"", "code=\"OK\""}),
            2.0);
  for (int port : worker_ports) {
    const auto worker = scrape(port);
    all.insert(worker.begin(), worker.end());
  }
  std::set<std::string> names;
  for (const auto& [key, value] : all) {
    names.insert(sample_name(key));
    EXPECT_EQ(key.find("step=\""), std::string::npos) << "unbounded step label: " << key;
  }

  std::ifstream file(kSource + "/deploy/grafana/dashboards/ddpd.json");
  ASSERT_TRUE(file.good());
  const auto dashboard = nlohmann::json::parse(file);
  std::vector<std::string> queries;
  collect_queries(dashboard, queries);
  std::set<std::string> queried;
  const std::regex metric("ddpd_[a-z_]+");
  for (const auto& q : queries) {
    for (std::sregex_iterator it(q.begin(), q.end(), metric), end; it != end; ++it) {
      queried.insert(it->str());
    }
  }
  EXPECT_GE(queried.size(), 12u);
  for (const auto& name : queried) EXPECT_TRUE(names.count(name)) << name << " is not exported";
  std::set<std::string> variables;
  for (const auto& v : dashboard["templating"]["list"]) variables.insert(v["name"]);
  EXPECT_EQ(variables, (std::set<std::string>{"job", "rank"}));

  // Values: rank 0's memory accounting and the comm job's busbw are the results' own figures.
  const auto ddp = cluster.show(ddp_job);
  const std::string ddp_sel = "job_id=\"" + ddp_job + "\"";
  const auto param_bytes =
      sample(all, "ddpd_memory_bytes",
             {ddp_sel, "rank=\"0\"", "kind=\"parameters\"", "point=\"after_init\""});
  ASSERT_TRUE(param_bytes.has_value());
  EXPECT_EQ(*param_bytes, ddp["memory"]["after_init"]["param_bytes"].get<double>());
  const auto state_bytes =
      sample(all, "ddpd_memory_bytes",
             {ddp_sel, "rank=\"0\"", "kind=\"optimizer_state\"", "point=\"after_step\""});
  ASSERT_TRUE(state_bytes.has_value());
  EXPECT_EQ(*state_bytes, ddp["memory"]["after_step"]["optimizer_state_bytes"].get<double>());
  const auto tensors_peak =
      sample(all, "ddpd_memory_bytes",
             {ddp_sel, "rank=\"0\"", "kind=\"tensors_peak\"", "point=\"last_step\""});
  ASSERT_TRUE(tensors_peak.has_value());
  EXPECT_EQ(*tensors_peak, ddp["memory"]["step_peak_tensor_bytes"].get<double>());
  EXPECT_GT(*tensors_peak, *param_bytes);  // the weights and more were alive during the step
  const auto activations_peak =
      sample(all, "ddpd_memory_bytes",
             {ddp_sel, "rank=\"0\"", "kind=\"activations_peak\"", "point=\"last_step\""});
  ASSERT_TRUE(activations_peak.has_value());
  EXPECT_EQ(*activations_peak, ddp["memory"]["step_peak_activation_bytes"].get<double>());
  EXPECT_GT(*activations_peak, 0);              // a forward saved tensors for its backward
  EXPECT_LT(*activations_peak, *tensors_peak);  // and they are part of the step's tensors
  EXPECT_EQ(sample(all, "ddpd_steps_total", {ddp_sel, "rank=\"1\""}), 3.0);
  const auto shown_comm = cluster.show(comm_job);
  ASSERT_EQ(shown_comm["rows"].size(), 4u);  // all_reduce and all_reduce_back_to_back, 2 sizes
  for (const auto& row : shown_comm["rows"]) {
    const auto busbw =
        sample(all, "ddpd_comm_busbw_bytes_per_second",
               {"job_id=\"" + comm_job + "\"", "rank=\"0\"",
                "size_bytes=\"" + std::to_string(row["size_bytes"].get<int64_t>()) + "\"",
                "collective=\"" + row["collective"].get<std::string>() + "\""});
    ASSERT_TRUE(busbw.has_value());
    EXPECT_NEAR(*busbw, row["busbw_bytes_per_second"].get<double>(),
                1e-6 * row["busbw_bytes_per_second"].get<double>());
  }
  EXPECT_EQ(sample(all, "ddpd_worker_jobs_total", {"kind=\"ddp\"", "result=\"succeeded\""}), 1.0);
}

// ddpctl show --trace: one track per rank; naive's all-reduces all start after backward ends,
// bucketed's (small buckets) start during backward on every rank.
TEST(Observability, TraceShowsOverlapOfBucketedAndNotOfNaive) {
  Cluster cluster(2, "trace");
  std::map<std::string, std::string> jobs;
  jobs["naive"] = cluster.submit({"--steps", "3", "--strategy", "naive"});
  jobs["bucketed"] =
      cluster.submit({"--steps", "3", "--strategy", "bucketed", "--bucket-mb", "0.05"});
  for (const auto& [strategy, job] : jobs) {
    ASSERT_EQ(cluster.ctl({"watch", job}).exit_code, 0);
    const std::string path = temp_dir() + "/trace-" + strategy + ".json";
    const auto o = cluster.ctl({"show", job, "--trace", path});
    ASSERT_EQ(o.exit_code, 0) << o.err;
    std::cout << strategy << ":\n" << o.out;
    EXPECT_NE(o.out.find("comm during backward"), std::string::npos) << o.out;
    std::ifstream in(path);
    const auto trace = nlohmann::json::parse(in);
    // (rank, step) → the backward span's end and the collectives' launch times.
    std::map<std::pair<int, int>, double> backward_end;
    std::map<std::pair<int, int>, std::vector<double>> launches;
    std::map<int, std::set<std::string>> names_by_rank;
    for (const auto& e : trace["traceEvents"]) {
      if (e["ph"] != "X") continue;
      const int rank = e["pid"], step = e["args"]["step"];
      const double ts = e["ts"], dur = e["dur"];
      EXPECT_GE(dur, 0);
      names_by_rank[rank].insert(e["name"].get<std::string>());
      if (e["name"] == "backward") backward_end[{rank, step}] = ts + dur;
      if (e["cat"] == "communication") {
        EXPECT_GE(e["tid"].get<int>(), 1);
        launches[{rank, step}].push_back(ts);
      }
    }
    ASSERT_EQ(names_by_rank.size(), 2u) << "one track per rank";
    for (const auto& [rank, names] : names_by_rank) {
      for (const char* phase : {"forward", "backward", "wait", "optimizer", "step 0", "step 2"}) {
        EXPECT_TRUE(names.count(phase)) << strategy << " rank " << rank << " has no " << phase;
      }
    }
    for (int rank = 0; rank < 2; ++rank) {
      int during_backward = 0, total = 0;
      for (int step = 0; step < 3; ++step) {
        ASSERT_TRUE(backward_end.count({rank, step}));
        for (double ts : launches[{rank, step}]) {
          ++total;
          during_backward += ts < backward_end[{rank, step}];
        }
      }
      EXPECT_GT(total, 3) << strategy;
      if (strategy == "naive") {
        EXPECT_EQ(during_backward, 0) << "naive all-reduces only after backward";
      } else {
        EXPECT_GT(during_backward, 0) << "bucketed launches buckets during backward";
      }
    }
  }
  // A comm job has no step spans: a clear error, not an empty file.
  auto comm = cluster.ctl({"submit", "comm", "--world-size", "2", "--sizes", "4KB", "--warmup", "0",
                           "--iters", "1", "--watch"});
  ASSERT_EQ(comm.exit_code, 0) << comm.err;
  const auto o = cluster.ctl(
      {"show", comm.out.substr(0, comm.out.find('\n')), "--trace", temp_dir() + "/none.json"});
  EXPECT_NE(o.exit_code, 0);
  EXPECT_NE(o.err.find("no step spans"), std::string::npos) << o.err;
}

// --log-format json: every daemon line is one JSON object; step lines carry job, rank, step.
TEST(Observability, JsonLogsCarryJobRankAndStep) {
  Cluster cluster(2, "jsonlog", {"--log-format", "json"}, [](int) {
    return std::vector<std::string>{"--log-format", "json", "--log-level", "debug"};
  });
  const std::string job = cluster.submit({"--steps", "3"});
  ASSERT_EQ(cluster.ctl({"watch", job}).exit_code, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let the last lines flush
  auto check = [&](const std::string& log, const std::string& who) {
    std::istringstream in(log);
    std::set<std::pair<int, int>> steps;  // (rank, step) lines of this job
    int lines = 0;
    for (std::string line; std::getline(in, line);) {
      if (line.empty() || line[0] != '{') continue;
      ++lines;
      const auto event = nlohmann::json::parse(line, nullptr, false);
      EXPECT_FALSE(event.is_discarded()) << who << ": not JSON: " << line;
      if (event.is_discarded()) continue;
      EXPECT_TRUE(event.contains("time") && event.contains("level") && event.contains("msg"))
          << line;
      if (event.value("job", "") == job && event.contains("step")) {
        EXPECT_TRUE(event["rank"].is_number_integer()) << line;
        steps.insert({event["rank"].get<int>(), event["step"].get<int>()});
      }
    }
    EXPECT_GT(lines, 0) << who << " wrote no JSON lines:\n" << log;
    return steps;
  };
  check(cluster.coordinator_log(), "coordinator");
  std::set<std::pair<int, int>> steps;
  for (int i = 0; i < 2; ++i) {
    const auto s = check(cluster.worker(i).log(), "worker " + std::to_string(i));
    steps.insert(s.begin(), s.end());
  }
  std::set<std::pair<int, int>> expected;
  for (int rank = 0; rank < 2; ++rank) {
    for (int step = 0; step < 3; ++step) expected.insert({rank, step});
  }
  EXPECT_EQ(steps, expected);
}

// Without a coordinator (torchrun-style), `run ddp --metrics-port` serves the same series.
TEST(Observability, StandaloneRunServesMetricsWhileTraining) {
  const int port = unused_port();
  BackgroundProcess run({bin("ddpd-worker"), "run", "ddp", "--steps", "100000", "--threads", "1",
                         "--metrics-port", std::to_string(port), "--job-id", "standalone"},
                        {}, "standalone-run");
  std::optional<double> steps;
  for (int i = 0; i < 300 && !(steps && *steps >= 3); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    steps = sample(parse_exposition(http_get(port, "/metrics").body), "ddpd_steps_total",
                   {"job_id=\"standalone\"", "rank=\"0\"", "strategy=\"bucketed\""});
  }
  ASSERT_TRUE(steps.has_value()) << run.log();
  EXPECT_GE(*steps, 3);
  const auto metrics = parse_exposition(http_get(port, "/metrics").body);
  const auto params =
      sample(metrics, "ddpd_memory_bytes",
             {"job_id=\"standalone\"", "kind=\"parameters\"", "point=\"after_init\""});
  ASSERT_TRUE(params.has_value());
  EXPECT_GT(*params, 0);
  run.signal(SIGKILL);
}

TEST(Observability, BadObservabilityFlagsAreRefusedByName) {
  auto o =
      run_process({bin("ddpd-coordinator"), "--log-format", "xml"}, {}, std::chrono::seconds(30));
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.err.find("--log-format"), std::string::npos) << o.err;
  o = run_process({bin("ddpd-worker"), "--log-level", "loud", "serve"}, {},
                  std::chrono::seconds(30));
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.err.find("--log-level"), std::string::npos) << o.err;
  // A metrics port already taken: the worker says which flag and exits.
  const int port = unused_port();
  BackgroundProcess holder(
      {bin("ddpd-coordinator"), "--metrics-port", std::to_string(port), "--listen",
       "127.0.0.1:" + std::to_string(unused_port()), "--db", temp_dir() + "/holder.db"},
      {{"DDPD_TOKEN", kToken}}, "metrics-holder");
  bool bound = false;
  for (int i = 0; i < 100 && !bound; ++i) {
    bound = http_get(port, "/metrics").status == 200;
    if (!bound) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(bound) << holder.log();
  o = run_process({bin("ddpd-worker"), "serve", "--metrics-port", std::to_string(port)}, {},
                  std::chrono::seconds(30));
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_NE(o.err.find("--metrics-port"), std::string::npos) << o.err;
}

}  // namespace
}  // namespace ddpd::testing
