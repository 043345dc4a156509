// The control plane with real daemons as real processes on loopback: ddpd-coordinator,
// ddpd-worker serve, and ddpctl as a user runs it.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include "ddpd/v1/ddpd.grpc.pb.h"
#include "e2e/cluster.h"
#include "support/process.h"

namespace ddpd::testing {
namespace {

double transition_time(const nlohmann::json& job, const std::string& state) {
  for (const auto& t : job["history"]) {
    if (t["state"] == state) return t["unix_time"].get<double>();
  }
  return -1;
}

TEST(ControlPlane, TwoRankJobSucceedsWithMetricsFromBothRanks) {
  Cluster cluster(2, "basic");
  const std::string job = cluster.submit({"--steps", "4"});
  const auto watch = cluster.ctl({"watch", job});
  EXPECT_EQ(watch.exit_code, 0) << watch.err;
  EXPECT_NE(watch.out.find("step 4/4"), std::string::npos) << watch.out;
  const auto r = cluster.show(job);
  EXPECT_EQ(r["state"], "SUCCEEDED") << r.dump();
  EXPECT_EQ(r["job_id"], job);
  EXPECT_LT(r["summary"]["max_param_spread"].get<double>(), 1e-6);
  ASSERT_EQ(r["steps"].size(), 4u);
  std::set<std::pair<int, int>> seen;
  for (const auto& s : r["rank_steps"]) seen.insert({s["rank"].get<int>(), s["step"].get<int>()});
  for (int rank = 0; rank < 2; ++rank) {
    for (int step = 0; step < 4; ++step)
      EXPECT_TRUE(seen.count({rank, step})) << rank << " " << step;
  }
  if (std::system("command -v gnuplot >/dev/null 2>&1") == 0) {
    const std::string png = temp_dir() + "/ddp.png";
    EXPECT_EQ(cluster.ctl({"show", job, "--plot", png}).exit_code, 0);
    EXPECT_GT(std::filesystem::file_size(png), 1000u);
  }
  std::vector<std::string> states;
  for (const auto& t : r["history"]) states.push_back(t["state"]);
  EXPECT_EQ(states, (std::vector<std::string>{"PENDING", "RUNNING", "SUCCEEDED"}));
  // CSV: a header and one row per rank and step.
  const auto csv = cluster.ctl({"show", job, "--csv"});
  EXPECT_EQ(std::count(csv.out.begin(), csv.out.end(), '\n'), 1 + 8) << csv.out;
  const auto list = cluster.ctl({"list"}).out;
  const auto row = list.substr(list.find(job), list.find('\n', list.find(job)) - list.find(job));
  EXPECT_NE(row.find("SUCCEEDED"), std::string::npos) << list;
}

TEST(ControlPlane, QueuedJobsRunOneAfterTheOther) {
  Cluster cluster(2, "queue");
  const std::string first = cluster.submit({"--steps", "3"});
  const std::string second = cluster.submit({"--steps", "3"});
  EXPECT_EQ(cluster.ctl({"watch", second}).exit_code, 0);
  const auto a = cluster.show(first), b = cluster.show(second);
  EXPECT_EQ(a["state"], "SUCCEEDED");
  EXPECT_EQ(b["state"], "SUCCEEDED");
  EXPECT_GE(transition_time(b, "RUNNING"), transition_time(a, "SUCCEEDED"))
      << "the second job started before the first ended";
}

TEST(ControlPlane, CancelStopsARunningJobAndFreesTheWorkers) {
  Cluster cluster(2, "cancel");
  const std::string job = cluster.submit({"--steps", "100000"});
  ASSERT_TRUE(cluster.wait_until([&] { return !cluster.show(job)["rank_steps"].empty(); },
                                 std::chrono::seconds(60)));
  const auto start = std::chrono::steady_clock::now();
  const auto cancel = cluster.ctl({"cancel", job});
  EXPECT_EQ(cancel.exit_code, 0) << cancel.err;
  EXPECT_EQ(cluster.show(job)["state"], "CANCELLED");
  EXPECT_TRUE(cluster.wait_until([&] { return cluster.count_workers("IDLE") == 2; },
                                 std::chrono::seconds(10)));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10);
  EXPECT_EQ(cluster.ctl({"cancel", job}).exit_code, 1) << "cancelling twice must be refused";
  const std::string next = cluster.submit({"--steps", "2"});
  EXPECT_EQ(cluster.ctl({"watch", next}).exit_code, 0);
}

TEST(ControlPlane, KilledWorkerFailsTheJobAndTheOtherReturnsToIdle) {
  Cluster cluster(2, "kill");
  const std::string job = cluster.submit({"--steps", "100000"});
  ASSERT_TRUE(cluster.wait_until([&] { return !cluster.show(job)["rank_steps"].empty(); },
                                 std::chrono::seconds(60)));
  // Rank 1's daemon, wherever placement put it: the ranks follow the workers' registration
  // order, which two daemons started together do not fix.
  cluster.worker(worker_index_of_rank(cluster, job, 1)).signal(SIGKILL);
  ASSERT_TRUE(cluster.wait_until([&] { return cluster.show(job)["state"] == "FAILED"; },
                                 std::chrono::seconds(20)));
  const auto r = cluster.show(job);
  // The daemon's rank died with it, and its peer says so: the data plane names the loss, where a
  // lost session alone (a cut link) names nothing (adoption_test.cpp).
  const std::string error = r["error"];
  EXPECT_NE(error.find("a peer rank closed its connection"), std::string::npos) << error;
  EXPECT_NE(error.find("rank 1 (pid "), std::string::npos) << error;
  EXPECT_TRUE(cluster.wait_until(
      [&] { return cluster.count_workers("IDLE") == 1 && cluster.count_workers("LOST") == 1; },
      std::chrono::seconds(20)));
}

// A stopped worker keeps its connection and goes silent: it is DISCONNECTED after
// --worker-timeout (3 s here), lost once its job stops advancing, and the loss names the silence.
TEST(ControlPlane, StoppedWorkerIsLostForItsSilence) {
  Cluster cluster(2, "stop");
  const std::string job = cluster.submit({"--steps", "100000"});
  ASSERT_TRUE(cluster.wait_until([&] { return !cluster.show(job)["rank_steps"].empty(); },
                                 std::chrono::seconds(60)));
  cluster.worker(1).signal(SIGSTOP);
  // Its rank trains on until its event pipe is full; then the job stops advancing.
  ASSERT_TRUE(cluster.wait_until([&] { return cluster.show(job)["state"] == "FAILED"; },
                                 std::chrono::seconds(90)));
  cluster.worker(1).signal(SIGCONT);
  const std::string error = cluster.show(job)["error"];
  EXPECT_NE(error.find(") lost: no heartbeat for "), std::string::npos) << error;
  EXPECT_NE(error.find("(--worker-timeout 3.0 s): the worker is stopped, hung or cut off"),
            std::string::npos)
      << error;
}

TEST(ControlPlane, CoordinatorRestartKeepsHistoryAndWorkersReRegister) {
  Cluster cluster(2, "restart");
  const std::string done = cluster.submit({"--steps", "2"});
  ASSERT_EQ(cluster.ctl({"watch", done}).exit_code, 0);
  const auto before = cluster.show(done);
  const std::string running = cluster.submit({"--steps", "100000"});
  ASSERT_TRUE(cluster.wait_until([&] { return !cluster.show(running)["rank_steps"].empty(); },
                                 std::chrono::seconds(60)));
  cluster.stop_coordinator();
  cluster.start_coordinator();
  // The running job is adopted: its ranks trained on, and their workers claim them again.
  ASSERT_TRUE(cluster.wait_until([&] { return cluster.count_workers("BUSY") == 2; },
                                 std::chrono::seconds(30)))
      << cluster.coordinator_log();
  const auto after = cluster.show(done);
  EXPECT_EQ(after["state"], "SUCCEEDED");
  EXPECT_EQ(after["summary"], before["summary"]);
  EXPECT_EQ(after["rank_steps"], before["rank_steps"]);
  const auto adopted = cluster.show(running);
  EXPECT_EQ(adopted["state"], "RUNNING");
  EXPECT_EQ(adopted["attempts"], 1);
  EXPECT_EQ(events_of(adopted, "adopted").size(), 1u) << adopted["events"].dump();
  ASSERT_EQ(cluster.ctl({"cancel", running}).exit_code, 0);
  ASSERT_TRUE(cluster.wait_until([&] { return cluster.count_workers("IDLE") == 2; },
                                 std::chrono::seconds(30)));
  const std::string next = cluster.submit({"--steps", "2"});
  EXPECT_EQ(cluster.ctl({"watch", next}).exit_code, 0);
}

TEST(ControlPlane, WrongTokenAndInvalidSpecAreRefused) {
  Cluster cluster(0, "refuse");
  const auto wrong = cluster.ctl({"list"}, "not-the-token");
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_NE(wrong.err.find("UNAUTHENTICATED"), std::string::npos) << wrong.err;
  // ddpctl refuses before sending ...
  const auto bad = cluster.ctl({"submit", "ddp", "--world-size", "2", "--batch", "7"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--batch"), std::string::npos) << bad.err;
  // ... and the coordinator refuses on its own, naming the proto field (API callers never
  // saw the flag).
  auto channel = grpc::CreateChannel(cluster.address(), grpc::InsecureChannelCredentials());
  auto stub = v1::Coordinator::NewStub(channel);
  v1::SubmitJobRequest request;
  request.mutable_spec()->set_world_size(2);
  request.mutable_spec()->mutable_ddp()->set_batch_size(7);
  request.mutable_spec()->mutable_ddp()->set_strategy("bucketed");
  for (const std::string& token : {std::string("wrong"), kToken}) {
    grpc::ClientContext context;
    context.AddMetadata("authorization", "Bearer " + token);
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::Job reply;
    const auto status = stub->SubmitJob(&context, request, &reply);
    if (token == kToken) {
      EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
      EXPECT_EQ(status.error_message().rfind("batch_size: ", 0), 0u) << status.error_message();
      EXPECT_EQ(status.error_message().find("--batch"), std::string::npos)
          << status.error_message();
    } else {
      EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    }
  }
  EXPECT_EQ(cluster.ctl({"show", "job-999999"}).exit_code, 1);
  // Nothing was accepted.
  EXPECT_EQ(cluster.ctl({"list"}).out.find("job-"), std::string::npos);
}

TEST(ControlPlane, JobWaitingTooLongForWorkersFailsWithTheReason) {
  const std::string address = "127.0.0.1:" + std::to_string(unused_port());
  const std::map<std::string, std::string> env{{"DDPD_TOKEN", kToken}};
  BackgroundProcess coordinator(
      {bin("ddpd-coordinator"), "--metrics-port", "0", "--listen", address, "--db",
       temp_dir() + "/pending.db", "--pending-timeout", "1"},
      env, "pending-coordinator");
  auto ctl = [&](std::vector<std::string> args) {
    std::vector<std::string> argv{bin("ddpctl"), "--coordinator", address};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_process(argv, env, std::chrono::seconds(30));
  };
  ProcessOutcome submitted;
  for (int i = 0; i < 100 && submitted.exit_code != 0; ++i) {
    submitted = ctl({"submit", "ddp", "--world-size", "2"});  // no worker will ever come
    if (submitted.exit_code != 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  const std::string job = submitted.out.substr(0, submitted.out.find('\n'));
  const auto watch = ctl({"watch", job});
  EXPECT_EQ(watch.exit_code, 1);
  const auto r = nlohmann::json::parse(ctl({"show", job, "--json"}).out);
  EXPECT_EQ(r["state"], "FAILED");
  EXPECT_EQ(r["error"], "waited 1 s for 2 idle workers offering gloo; 0 idle");
}

// A cuda job needs workers that offer nccl; CPU-build workers do not, so it waits, failing
// after --pending-timeout with the backend named, and never reaches a worker.
TEST(ControlPlane, CudaJobsWaitForWorkersOfferingNccl) {
  Cluster cluster(1, "nccl-placement", {"--pending-timeout", "2"});
  // `workers` shows what each worker offers: this CPU build, no GPU and gloo only.
  const std::string table = cluster.ctl({"workers"}).out;
  EXPECT_NE(table.find("GPUS  BACKENDS"), std::string::npos) << table;
  EXPECT_NE(table.find(" 0     gloo "), std::string::npos) << table;
  const auto cuda = cluster.ctl({"submit", "ddp", "--device", "cuda", "--steps", "2"});
  ASSERT_EQ(cuda.exit_code, 0) << cuda.err;
  const std::string cuda_job = cuda.out.substr(0, cuda.out.find('\n'));
  EXPECT_EQ(cluster.ctl({"watch", cuda_job}).exit_code, 1);
  const auto failed = nlohmann::json::parse(cluster.ctl({"show", cuda_job, "--json"}).out);
  EXPECT_EQ(failed["state"], "FAILED");
  EXPECT_EQ(failed["error"], "waited 2 s for 1 idle workers offering nccl; 1 idle");
  EXPECT_TRUE(failed["workers"].empty()) << failed.dump();
  EXPECT_NE(cluster.ctl({"show", cuda_job}).out.find("device cuda"), std::string::npos);
  // The worker was never given it, and takes a CPU job at once.
  const auto cpu =
      cluster.ctl({"submit", "ddp", "--steps", "2", "--batch", "2", "--context", "16"});
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  EXPECT_EQ(cluster.ctl({"watch", cpu.out.substr(0, cpu.out.find('\n'))}).exit_code, 0);
}

TEST(ControlPlane, TlsWhenCertificatesAreGiven) {
  const std::string dir = temp_dir();
  const auto made =
      run_process({"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                   dir + "/tls.key", "-out", dir + "/tls.crt", "-days", "1", "-subj",
                   "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"},
                  {}, std::chrono::seconds(60));
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const std::string address = "127.0.0.1:" + std::to_string(unused_port());
  const std::map<std::string, std::string> env{{"DDPD_TOKEN", kToken}};
  // The worker starts first and retries while no coordinator answers, as after a restart. Its
  // TLS handshakes once missed their connect deadline while it waited unpolled between tries,
  // and it registered 75-91 s after the coordinator's start (0.7 s now): past the loop below.
  BackgroundProcess worker({bin("ddpd-worker"), "serve", "--coordinator", address, "--tls-ca",
                            dir + "/tls.crt", "--worker-id", "tls-w0"},
                           env, "tls-worker");
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  BackgroundProcess coordinator(
      {bin("ddpd-coordinator"), "--metrics-port", "0", "--listen", address, "--db", dir + "/tls.db",
       "--tls-cert", dir + "/tls.crt", "--tls-key", dir + "/tls.key"},
      env, "tls-coordinator");
  auto ctl = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv{bin("ddpctl"), "--coordinator", address};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back("workers");
    return run_process(argv, env, std::chrono::seconds(30));
  };
  bool registered = false;
  for (int i = 0; i < 150 && !registered; ++i) {
    const auto o = ctl({"--tls-ca", dir + "/tls.crt"});
    registered = o.exit_code == 0 && o.out.find("tls-w0") != std::string::npos &&
                 o.out.find("IDLE") != std::string::npos;
    if (!registered) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_TRUE(registered) << coordinator.log() << worker.log();
  // A plaintext client cannot talk to the TLS endpoint, and is told the flag. --wait 0: no
  // retries, which would wait out --wait's 30 s.
  const auto plaintext = ctl({"--wait", "0"});
  EXPECT_NE(plaintext.exit_code, 0);
  EXPECT_NE(plaintext.err.find("--tls-cert needs --tls-ca"), std::string::npos) << plaintext.err;
}

TEST(ControlPlane, LocalRunsAJobEndToEnd) {
  const auto o = run_process({bin("ddpctl"), "local", "--workers", "2", "--json", "ddp", "--model",
                              "tiny", "--steps", "3", "--batch", "4", "--context", "16"},
                             {}, std::chrono::seconds(180));
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const auto r = nlohmann::json::parse(o.out);
  EXPECT_EQ(r["state"], "SUCCEEDED");
  EXPECT_EQ(r["steps"].size(), 3u);
  EXPECT_EQ(r["rank_steps"].size(), 6u);
  EXPECT_LT(r["summary"]["max_param_spread"].get<double>(), 1e-6);
}

TEST(ControlPlane, LocalCommSweepAcrossWorldSizes) {
  const auto o = run_process({bin("ddpctl"), "local", "--workers", "3", "--json", "comm",
                              "--world-sizes", "2,3", "--collective", "all_reduce,all_gather",
                              "--sizes", "64KB,1MB", "--warmup", "1", "--iters", "2"},
                             {}, std::chrono::seconds(180));
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const auto results = nlohmann::json::parse(o.out);
  ASSERT_EQ(results.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const auto& r = results[i];
    EXPECT_EQ(r["state"], "SUCCEEDED") << r.dump();
    EXPECT_EQ(r["world_size"], i + 2);
    // 2 collectives × 2 sizes, and the all-reduce back-to-back at both sizes.
    ASSERT_EQ(r["rows"].size(), 6u);
    for (const auto& row : r["rows"]) {
      EXPECT_TRUE(row["data_ok"].get<bool>());
      EXPECT_EQ(row["rank_mean_seconds"].size(), static_cast<size_t>(i + 2));
    }
  }
}

// `plan bucket --from-job JOB` on a finished comm job reads alpha and beta from the job's
// back-to-back all-reduce fit. On a loaded host that fit can find no per-call overhead (alpha <=
// 0: once in the clean-clone suite under ctest -j2, 2026-11-28), and the advisor then refuses,
// naming --from-job. Which of the two happens follows from the job's own fit, read here, not from
// the host's speed.
void expect_bucket_advice_follows_the_fit(Cluster& cluster, const std::string& job) {
  const auto shown = nlohmann::json::parse(cluster.ctl({"show", job, "--json"}).out);
  const nlohmann::json& fits =
      shown.contains("fits") ? shown.at("fits") : shown.at("result").at("fits");
  double fitted_alpha = 0;
  for (const auto& fit : fits) {
    if (fit.at("collective") == "all_reduce_back_to_back") fitted_alpha = fit.at("alpha_seconds");
  }
  const auto advice =
      cluster.ctl({"plan", "bucket", "--from-job", job, "--model", "small", "--json"});
  if (fitted_alpha <= 0) {
    EXPECT_EQ(advice.exit_code, 2);
    EXPECT_NE(advice.err.find("--from-job: its all_reduce fit found no per-call overhead"),
              std::string::npos)
        << advice.err;
    return;
  }
  ASSERT_EQ(advice.exit_code, 0) << advice.err;
  const auto a = nlohmann::json::parse(advice.out);
  EXPECT_EQ(a["alpha_seconds"].get<double>(), fitted_alpha);
  EXPECT_GT(a["beta_bytes_per_second"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(
      a["recommended_bucket_bytes"].get<double>(),
      std::sqrt(a["gradient_bytes"].get<double>() * a["beta_bytes_per_second"].get<double>() *
                a["alpha_seconds"].get<double>()));
  EXPECT_EQ(a["curve"].size(), 4u);
}

TEST(ControlPlane, SubmittedCommJobShowsATable) {
  Cluster cluster(2, "comm");
  // Four small sizes anchor the per-call overhead: with one small size beside 4 MB (in L2) and
  // 16 MB (from memory, slower per byte), a loaded host sometimes fitted a negative overhead, and
  // the advisor rightly refused it (1 run of 415 tests under ctest -j2, 2026-11-26).
  auto o = cluster.ctl({"submit", "comm", "--world-size", "2", "--sizes",
                        "4KB,16KB,64KB,256KB,4MB,16MB", "--iters", "5"});
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const std::string job = o.out.substr(0, o.out.find('\n'));
  EXPECT_EQ(cluster.ctl({"watch", job}).exit_code, 0);
  const auto table = cluster.ctl({"show", job}).out;
  EXPECT_NE(table.find("all_reduce"), std::string::npos) << table;
  EXPECT_NE(table.find("busbw"), std::string::npos) << table;
  expect_bucket_advice_follows_the_fit(cluster, job);
  // Charts (gnuplot is installed by scripts/setup.sh).
  if (std::system("command -v gnuplot >/dev/null 2>&1") == 0) {
    const std::string png = temp_dir() + "/comm.png", svg = temp_dir() + "/comm.svg";
    EXPECT_EQ(cluster.ctl({"show", job, "--plot", png}).exit_code, 0);
    EXPECT_EQ(cluster.ctl({"show", job, "--plot", svg}).exit_code, 0);
    std::ifstream in(png, std::ios::binary);
    char magic[4] = {0};
    in.read(magic, 4);
    EXPECT_EQ(std::string(magic + 1, 3), "PNG");
    std::ifstream svg_in(svg);
    const std::string svg_text((std::istreambuf_iterator<char>(svg_in)),
                               std::istreambuf_iterator<char>());
    EXPECT_NE(svg_text.find("<svg"), std::string::npos);
    EXPECT_NE(svg_text.find("all_reduce, 2 ranks"), std::string::npos);
  }
  const auto bad_plot = cluster.ctl({"show", job, "--plot", temp_dir() + "/chart.bmp"});
  EXPECT_EQ(bad_plot.exit_code, 2);
  EXPECT_NE(bad_plot.err.find("--plot"), std::string::npos) << bad_plot.err;
  const auto bad = cluster.ctl({"submit", "comm", "--world-size", "2", "--collective", "gossip"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--collective"), std::string::npos) << bad.err;
}

TEST(ControlPlane, LocalExitsNonZeroWhenTheJobFails) {
  const auto o = run_process({bin("ddpctl"), "local", "--workers", "2", "--json", "ddp", "--steps",
                              "2", "--data", "/nonexistent.bin"},
                             {}, std::chrono::seconds(180));
  EXPECT_EQ(o.exit_code, 1);
  const auto r = nlohmann::json::parse(o.out);
  EXPECT_EQ(r["state"], "FAILED");
  EXPECT_NE(r["error"].get<std::string>().find("--data"), std::string::npos) << r.dump();
}

}  // namespace
}  // namespace ddpd::testing
