// Hardening against real daemons: admission by memory (the standalone runners and the
// coordinator refuse a job whose estimated per-rank memory exceeds the limit, naming the
// estimate and the limit), an allocation failure inside a job ends it with one line, and the
// coordinator's limits refuse what exceeds them, naming the limit.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "ddpd/api/session_protocol.h"
#include "ddpd/common/memory_estimate.h"
#include "ddpd/v1/ddpd.grpc.pb.h"
#include "e2e/cluster.h"

namespace ddpd::testing {
namespace {

int lines(const std::string& text) {
  int count = 0;
  for (char c : text) count += c == '\n';
  return count;
}

// The issue's example: a context of 10^8 tokens squares into exabytes of attention scores.
TEST(Admission, StandaloneRunnersRefuseAJobThatDoesNotFitInOneLine) {
  for (const std::vector<std::string>& runner :
       {std::vector<std::string>{bin("ddpd-worker"), "run", "ddp"},
        std::vector<std::string>{bin("ddpd-train")}}) {
    auto argv = runner;
    argv.insert(argv.end(), {"--model", "tiny", "--context", "100000000", "--steps", "1"});
    const auto o = run_process(argv, {}, std::chrono::seconds(60));
    EXPECT_EQ(o.exit_code, 2) << o.err;
    EXPECT_EQ(lines(o.err), 1) << o.err;
    EXPECT_EQ(o.err.rfind("error: --context: the job needs about ", 0), 0u) << o.err;
    EXPECT_NE(o.err.find("GB per rank at its peak (weights "), std::string::npos) << o.err;
    EXPECT_NE(o.err.find("more than this machine's available memory"), std::string::npos) << o.err;
  }
}

TEST(Admission, CoordinatorRefusesAtSubmitWithTheEstimateAndTheLimit) {
  Cluster cluster(1, "admission", {}, [](int) {
    return std::vector<std::string>{"--memory-gb", "1"};
  });
  // 24 blocks of tiny at context 256, 16 rows: each block keeps 4096·1664 floats and 16·4·256²
  // probabilities, 1.13 GB in all at the loss's backward (memory_estimate.h). Recomputing each
  // block keeps 0.11 GB at its peak; a smaller batch fits too. At world 1 fsdp shards nothing.
  DdpJobOptions job;
  job.model = "tiny";
  job.num_layers = 24;
  job.context_length = 256;
  job.vocab_size = 1000;
  job.batch_size = 16;
  const auto remedies = memory_remedies(job, 1, 1000000000);
  ASSERT_EQ(remedies.size(), 2u);
  EXPECT_EQ(remedies[0].flag, "--activation-checkpointing");
  EXPECT_EQ(remedies[1].flag, "--batch");
  const auto refused =
      cluster.ctl({"submit", "ddp", "--world-size", "1", "--model", "tiny", "--layers", "24",
                   "--context", "256", "--vocab", "1000", "--batch", "16"});
  EXPECT_NE(refused.exit_code, 0);
  const std::string peak = describe(estimate_rank_memory(job, 1));
  EXPECT_NE(refused.err.find("the job " + peak), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("the job needs about 1.13 GB per rank at its peak"), std::string::npos)
      << refused.err;
  EXPECT_NE(refused.err.find("more than the largest registered worker's memory (1.00 GB)"),
            std::string::npos)
      << refused.err;
  char fits[160];
  std::snprintf(fits, sizeof fits,
                "it fits with --activation-checkpointing block (%.2f GB) or --batch %s (%.2f GB)",
                remedies[0].total_bytes / 1e9, remedies[1].value.c_str(),
                remedies[1].total_bytes / 1e9);
  EXPECT_NE(refused.err.find(fits), std::string::npos) << refused.err;
  // A job that fits is accepted and runs.
  const auto accepted = cluster.ctl({"submit", "ddp", "--world-size", "1", "--model", "tiny",
                                     "--context", "16", "--batch", "2", "--steps", "2"});
  ASSERT_EQ(accepted.exit_code, 0) << accepted.err;
  EXPECT_EQ(cluster.wait_for_end(job_id_of(accepted.out))["state"], "SUCCEEDED");
}

// A worker that advertises far more memory than it has lets a job through whose embedding
// cannot be allocated (2.6 TB): the job FAILS with one line saying so, no backtrace.
TEST(Admission, AnAllocationFailureInsideAJobEndsItWithOneLine) {
  Cluster cluster(1, "oom", {}, [](int) {
    return std::vector<std::string>{"--memory-gb", "1000000000"};
  });
  const auto submitted = cluster.ctl({"submit", "ddp", "--world-size", "1", "--model", "tiny",
                                      "--vocab", "10000000000", "--steps", "1"});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  const auto job = cluster.wait_for_end(job_id_of(submitted.out));
  EXPECT_EQ(job["state"], "FAILED");
  const std::string reason = job["history"].back()["reason"];
  EXPECT_NE(reason.find("out of memory: "), std::string::npos) << reason;
  EXPECT_EQ(reason.find("frame #"), std::string::npos) << reason;
  EXPECT_EQ(reason.find('\n'), std::string::npos) << reason;
}

TEST(Limits, PendingJobsWatchersAndMessageSizeAreRefusedNamingTheLimit) {
  Cluster cluster(
      0, "limits",
      {"--max-pending-jobs", "2", "--max-watchers-per-job", "1", "--max-message-bytes", "65536"});
  const std::string first = cluster.submit({});
  cluster.submit({});
  const auto third = cluster.ctl({"submit", "ddp", "--world-size", "2", "--model", "tiny"});
  EXPECT_NE(third.exit_code, 0);
  EXPECT_NE(third.err.find("max_pending_jobs: 2 jobs are already pending (limit 2)"),
            std::string::npos)
      << third.err;

  // One watcher holds the pending job's stream open; a second is refused.
  BackgroundProcess watcher({bin("ddpctl"), "--coordinator", cluster.address(), "watch", first},
                            {{"DDPD_TOKEN", kToken}}, "limits-watcher");
  // It has its stream once it printed the job's first event.
  ASSERT_TRUE(cluster.wait_until([&] { return watcher.log().find("PENDING") != std::string::npos; },
                                 std::chrono::seconds(30)))
      << watcher.log();
  const auto second =
      run_process({bin("ddpctl"), "--coordinator", cluster.address(), "watch", first},
                  {{"DDPD_TOKEN", kToken}}, std::chrono::seconds(30));
  EXPECT_NE(second.exit_code, 0);
  EXPECT_NE(second.err.find("max_watchers_per_job: job " + first + " already has 1 watchers"),
            std::string::npos)
      << second.err;
  watcher.signal(SIGTERM);

  // A request over --max-message-bytes (a 100 KB data path) is refused before it is parsed.
  const auto oversized = cluster.ctl({"submit", "ddp", "--world-size", "2", "--model", "tiny",
                                      "--data", "/" + std::string(100000, 'x')});
  EXPECT_NE(oversized.exit_code, 0);
  EXPECT_NE(oversized.err.find("larger than max"), std::string::npos) << oversized.err;
}

}  // namespace
}  // namespace ddpd::testing

namespace ddpd::testing {
namespace {

// A worker from before session protocol versions (its hello has none), or from a newer build:
// refused with FAILED_PRECONDITION naming both versions, before it is registered.
TEST(Hardening, AWorkerSpeakingAnotherSessionProtocolIsRefusedNamingBothVersions) {
  Cluster cluster(0, "versions");
  auto stub = v1::Coordinator::NewStub(
      grpc::CreateChannel(cluster.address(), grpc::InsecureChannelCredentials()));
  for (const int version : {0, kSessionProtocolVersion + 1}) {
    grpc::ClientContext context;
    context.AddMetadata("authorization", "Bearer " + kToken);
    auto session = stub->WorkerSession(&context);
    v1::WorkerMessage hello;
    hello.mutable_hello()->set_worker_id("old-or-new");
    hello.mutable_hello()->set_advertised_host("127.0.0.1");
    hello.mutable_hello()->set_rendezvous_port(29999);
    hello.mutable_hello()->set_protocol_version(version);
    ASSERT_TRUE(session->Write(hello));
    session->WritesDone();
    v1::CoordinatorMessage reply;
    EXPECT_FALSE(session->Read(&reply));
    const grpc::Status status = session->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_EQ(status.error_message(), session_protocol_refusal(version));
    EXPECT_NE(status.error_message().find("this coordinator " +
                                          std::to_string(kOldestSessionProtocolVersion) + ".." +
                                          std::to_string(kSessionProtocolVersion)),
              std::string::npos);
  }
  EXPECT_EQ(cluster.count_workers("IDLE"), 0);
}

// A worker session that never reads: the coordinator queues what it sends (assignments here,
// each made large by a comm job with 2,000 sizes), and once the queue passes its bound it drops
// the session (the worker is LOST) instead of blocking. Throughout, every RPC is answered
// within its deadline: a coordinator whose writes blocked on the unread stream would hang here.
TEST(Hardening, ASessionThatNeverReadsIsDroppedAndTheCoordinatorKeepsServing) {
  Cluster cluster(0, "silent", {"--max-pending-jobs", "100000"});
  auto channel = grpc::CreateChannel(cluster.address(), grpc::InsecureChannelCredentials());
  auto stub = v1::Coordinator::NewStub(channel);
  auto authorize = [](grpc::ClientContext& context) {
    context.AddMetadata("authorization", "Bearer " + kToken);
  };
  grpc::ClientContext session_context;
  authorize(session_context);
  auto session = stub->WorkerSession(&session_context);
  v1::WorkerMessage hello;
  hello.mutable_hello()->set_worker_id("silent");
  hello.mutable_hello()->set_advertised_host("127.0.0.1");
  hello.mutable_hello()->set_rendezvous_port(29999);
  hello.mutable_hello()->set_protocol_version(kSessionProtocolVersion);
  hello.mutable_hello()->set_cpu_count(2);
  hello.mutable_hello()->add_backends("gloo");
  ASSERT_TRUE(session->Write(hello));
  ASSERT_TRUE(cluster.wait_until([&] { return cluster.count_workers("IDLE") == 1; },
                                 std::chrono::seconds(30)));

  v1::SubmitJobRequest request;
  request.mutable_spec()->set_world_size(1);
  auto* comm = request.mutable_spec()->mutable_comm();
  comm->add_collectives("all_reduce");
  comm->set_backend("gloo");
  comm->set_dtype("float32");
  for (int i = 0; i < 2000; ++i) comm->add_sizes_bytes(1024 + 4 * i);
  const size_t assignment_bytes = request.spec().ByteSizeLong();

  int submitted = 0;
  bool dropped = false;
  double slowest_rpc_seconds = 0;
  const auto started = std::chrono::steady_clock::now();
  // At most 64 MB of unread assignments; the coordinator's bound is far below.
  while (!dropped && submitted * assignment_bytes < (size_t{64} << 20)) {
    grpc::ClientContext context;
    authorize(context);
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::Job job;
    const auto before = std::chrono::steady_clock::now();
    const grpc::Status status = stub->SubmitJob(&context, request, &job);
    slowest_rpc_seconds =
        std::max(slowest_rpc_seconds,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - before).count());
    ASSERT_TRUE(status.ok()) << "SubmitJob #" << submitted << ": " << status.error_message() << "\n"
                             << cluster.coordinator_log();
    ++submitted;
    // The silent worker finishes each job without reading its assignment: job ids are sequential.
    v1::WorkerMessage result;
    result.set_job_id(job.job_id());
    result.mutable_result()->set_job_id(job.job_id());
    result.mutable_result()->set_rank(0);
    result.mutable_result()->set_succeeded(true);
    result.mutable_result()->set_result_json("{}");
    if (!session->Write(result)) {
      dropped = true;  // the coordinator closed the session
      break;
    }
    if (submitted % 50 == 0) {
      dropped = cluster.count_workers("LOST") + cluster.count_workers("DISCONNECTED") == 1;
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("[ silent ] %d assignments of %zu B queued in %.1f s; slowest SubmitJob %.3f s\n",
              submitted, assignment_bytes, seconds, slowest_rpc_seconds);
  // Dropped: DISCONNECTED while its (one-rank) job may still run, as any session that ends.
  EXPECT_TRUE(cluster.wait_until(
      [&] { return cluster.count_workers("LOST") + cluster.count_workers("DISCONNECTED") == 1; },
      std::chrono::seconds(30)))
      << "the never-reading session was not dropped after " << submitted << " assignments";
  EXPECT_NE(cluster.coordinator_log().find("worker=silent disconnected: stopped reading"),
            std::string::npos)
      << cluster.coordinator_log();
  // Still serving: a listing answers.
  const auto listed = cluster.ctl({"list"});
  EXPECT_EQ(listed.exit_code, 0) << listed.err;
  session_context.TryCancel();
}

// One coordinator per store and per port: a second coordinator on the first's --db refuses to
// start, naming the first's pid, and leaves the store alone (the first's job history and its
// next job id are untouched); one on the first's --listen refuses naming the address, where
// gRPC's SO_REUSEPORT used to let it start and take half of the clients.
// serve --heartbeat 0 or -1 used to send heartbeats in a busy loop; now refused naming the flag.
TEST(BadInput, HeartbeatOutsideItsBoundsIsRefusedNamingTheFlag) {
  for (const std::string value : {"0", "-1", "61"}) {
    const auto o = run_process(
        {bin("ddpd-worker"), "serve", "--heartbeat", value, "--coordinator", "127.0.0.1:1"}, {},
        std::chrono::seconds(30));
    EXPECT_EQ(o.exit_code, 2) << value << ": " << o.err;
    EXPECT_NE(o.err.find("--heartbeat"), std::string::npos) << value << ": " << o.err;
    EXPECT_NE(o.err.find("0.05"), std::string::npos) << value << ": " << o.err;
  }
}

// Values that used to be accepted and then broke the job or were silently changed: each is
// refused before anything starts, in one line naming the flag.
TEST(BadInput, ValuesThatUsedToBreakLaterAreRefusedNamingTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--seed", "-1"}, "--seed"},                      // wrapped to 2^64 - 1
      {{"--steps", "99999999999999999999"}, "--steps"},  // became INT64_MAX
      {{"--strategy", ""}, "--strategy"},                // ran as bucketed, shown blank
      {{"--threads", "1000"}, "--threads"},              // ran 10x slower
      {{"--steps", "3", "--inject", "hang:rank=0,step=5"}, "--inject"},  // never fired
      {{"--inject", "crash-during-checkpoint:rank=0,step=1"}, "--inject"},
      {{"--inject", "slow:rank=0,step=1,factor=2,rank=1"}, "--inject"},  // which rank?
  };
  for (const auto& [flags, flag] : cases) {
    std::vector<std::string> argv{bin("ddpctl"), "local", "ddp", "--workers", "1"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    const auto o = run_process(argv, {}, std::chrono::seconds(60));
    EXPECT_EQ(o.exit_code, 2) << flags.back() << ": " << o.err;
    EXPECT_EQ(lines(o.err), 1) << o.err;
    EXPECT_NE(o.err.find(flag), std::string::npos) << flags.back() << ": " << o.err;
  }
  // gRPC took a port out of range as "any port" and logged the one it was given.
  const auto listen = run_process(
      {bin("ddpd-coordinator"), "--listen", "127.0.0.1:99999", "--db", temp_dir() + "/p.db"}, {},
      std::chrono::seconds(30));
  EXPECT_EQ(listen.exit_code, 2) << listen.err;
  EXPECT_NE(listen.err.find("--listen"), std::string::npos) << listen.err;
  EXPECT_NE(listen.err.find("0..65535"), std::string::npos) << listen.err;
}

// A checkpoint write that runs out of space fails the job and closes what it opened: the worker
// daemon, which outlives the job, holds no file on the full tmpfs, and the tmpfs unmounts. A
// failed write used to leave the rank's file open (deleted, its space in use) until the daemon
// exited.
TEST(Checkpoints, AWriteThatRunsOutOfSpaceClosesItsFiles) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounting a tmpfs needs root";
  const std::string dir = temp_dir() + "/full-tmpfs";
  std::filesystem::create_directories(dir);
  // 256 KiB: the tiny model's parameters alone are 5.6 MB.
  const auto mounted =
      run_process({"/usr/bin/mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", dir}, {},
                  std::chrono::seconds(30));
  if (mounted.exit_code != 0) GTEST_SKIP() << "cannot mount a tmpfs here: " << mounted.err;
  {
    Cluster cluster(1, "enospc");
    const auto submitted =
        cluster.ctl({"submit", "ddp", "--world-size", "1", "--model", "tiny", "--steps", "3",
                     "--checkpoint-dir", dir, "--checkpoint-every", "1"});
    ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
    const auto job = cluster.wait_for_end(job_id_of(submitted.out));
    EXPECT_EQ(job["state"], "FAILED");
    const std::string reason = job["history"].back()["reason"];
    EXPECT_NE(reason.find("No space left on device"), std::string::npos) << reason;
    std::vector<std::string> held;
    const std::string fds = "/proc/" + std::to_string(cluster.worker(0).pid()) + "/fd";
    for (const auto& entry : std::filesystem::directory_iterator(fds)) {
      std::error_code error;
      const std::string target = std::filesystem::read_symlink(entry.path(), error).string();
      if (!error && target.rfind(dir, 0) == 0) held.push_back(target);
    }
    EXPECT_TRUE(held.empty()) << "the worker daemon still holds " << held.size() << " file(s), "
                              << (held.empty() ? "" : held.front());
  }
  const auto unmounted = run_process({"/usr/bin/umount", dir}, {}, std::chrono::seconds(30));
  EXPECT_EQ(unmounted.exit_code, 0) << unmounted.err;
}

TEST(Exclusive, ASecondCoordinatorOnTheSameStoreOrPortRefusesToStart) {
  Cluster cluster(0, "exclusive");
  const std::string first_job = cluster.submit({});
  const std::map<std::string, std::string> env{{"DDPD_TOKEN", kToken}};

  const auto same_db = run_process(
      {bin("ddpd-coordinator"), "--listen", "127.0.0.1:" + std::to_string(unused_port()), "--db",
       cluster.db(), "--metrics-port", "0"},
      env, std::chrono::seconds(30));
  EXPECT_EQ(same_db.exit_code, 1) << same_db.err;
  const std::string holder = "(pid " + std::to_string(cluster.coordinator_pid()) + ",";
  EXPECT_NE(
      same_db.err.find("--db: " + cluster.db() + " is in use by another coordinator " + holder),
      std::string::npos)
      << same_db.err;

  const auto same_port =
      run_process({bin("ddpd-coordinator"), "--listen", cluster.address(), "--db",
                   temp_dir() + "/exclusive-other.db", "--metrics-port", "0"},
                  env, std::chrono::seconds(30));
  EXPECT_EQ(same_port.exit_code, 1) << same_port.err;
  EXPECT_NE(same_port.err.find("--listen: cannot listen on " + cluster.address()),
            std::string::npos)
      << same_port.err;

  // The first coordinator still owns its store: its job is where it was, and the next id follows.
  const auto shown = cluster.ctl({"show", first_job, "--json"});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_EQ(shown.out.find("coordinator restarted"), std::string::npos) << shown.out;
  const std::string second_job = cluster.submit({});
  EXPECT_NE(second_job, first_job);
}

}  // namespace
}  // namespace ddpd::testing
