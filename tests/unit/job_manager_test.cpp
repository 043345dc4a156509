// The job lifecycle through JobManager, with fake worker links and a clock moved by hand: no
// daemon, no gRPC, no sleep. The store is the real SQLite one, in a file of the test's own.
// The end-to-end tests (tests/e2e/) keep one case each to prove the wiring through real daemons.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <thread>

#include "ddpd/api/restart_policy.h"
#include "job_manager.h"

namespace ddpd::coordinator {
namespace {

// The restart policy as the coordinator asks it: with the job's options decoded from its spec.
bool policy_heals(const v1::Job& job) { return may_heal(job, ddp_options_of(job.spec())); }
bool policy_shrinks(const v1::Job& job, int lost_rank) {
  return may_shrink_in_place(job, ddp_options_of(job.spec()), lost_rank);
}

class FakeClock final : public LifecycleClock {
 public:
  TimePoint steady_now() const override { return now_; }
  double unix_seconds() const override {
    return 1.7e9 + std::chrono::duration<double>(now_.time_since_epoch()).count();
  }
  void advance(double seconds) {
    now_ += std::chrono::duration_cast<TimePoint::duration>(std::chrono::duration<double>(seconds));
  }

 private:
  TimePoint now_{};
};

// What the manager said to one worker.
struct FakeLink final : WorkerLink {
  std::vector<v1::CoordinatorMessage> sent;
  bool disconnected = false;
  void send(const v1::CoordinatorMessage& message) override { sent.push_back(message); }
  void disconnect() override { disconnected = true; }

  std::vector<v1::Assignment> assignments() const {
    std::vector<v1::Assignment> out;
    for (const auto& m : sent) {
      if (m.has_assign()) out.push_back(m.assign());
    }
    return out;
  }
  std::vector<v1::HealGroup> heals() const {
    std::vector<v1::HealGroup> out;
    for (const auto& m : sent) {
      if (m.has_heal()) out.push_back(m.heal());
    }
    return out;
  }
  int cancels(const std::string& job_id) const {
    int n = 0;
    for (const auto& m : sent) n += m.cancel_job_id() == job_id;
    return n;
  }
};

v1::JobSpec ddp_spec(int world_size) {
  v1::JobSpec spec;
  spec.set_world_size(world_size);
  auto* ddp = spec.mutable_ddp();
  ddp->set_model("tiny");
  ddp->set_steps(20);
  ddp->set_batch_size(12);  // divisible by 1, 2, 3 and 4: every shrink is allowed
  return spec;
}

// World 3 that may heal once and shrink to 2 ranks.
v1::JobSpec shrinkable_spec() {
  auto spec = ddp_spec(3);
  spec.mutable_ddp()->set_max_restarts(1);
  spec.mutable_ddp()->set_min_world_size(2);
  return spec;
}

class JobManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "ddpd-job-manager-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".db";
    std::remove(path_.c_str());
    options_.worker_timeout = std::chrono::seconds(15);
    // The tests move the fake clock by seconds between ticks; AdoptionTest tests the check.
    options_.own_pause = std::chrono::milliseconds(0);
    open();
  }
  void TearDown() override {
    manager_.reset();
    store_.reset();
    for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path_ + suffix).c_str());
  }
  void open() {
    manager_.reset();
    store_ = std::make_unique<JobStore>(path_);
    manager_ = std::make_unique<JobManager>(options_, *store_, clock_, [this] { ++changes_; });
  }

  FakeLink& add_worker(const std::string& id) {
    v1::WorkerHello hello;
    hello.set_worker_id(id);
    hello.set_advertised_host("10.0.0." + std::to_string(links_.size() + 1));
    hello.set_rendezvous_port(29500);
    auto link = std::make_shared<FakeLink>();
    links_[id] = link;
    EXPECT_FALSE(manager_->register_worker(hello, link).has_value());
    return *link;
  }
  std::string submit(const v1::JobSpec& spec) {
    v1::SubmitJobRequest request;
    *request.mutable_spec() = spec;
    v1::Job job;
    EXPECT_FALSE(manager_->submit(request, ddp_options_of(spec), &job).has_value());
    return job.job_id();
  }
  const v1::Job& job(const std::string& id) { return *manager_->job(id); }
  // The worker's session ends, and its job then goes --worker-timeout without advancing: the
  // data plane's evidence that its rank is gone too.
  void lose(const std::string& worker, const std::string& reason) {
    manager_->lost(worker, links_[worker].get(), reason);
    clock_.advance(seconds(options_.worker_timeout));
    manager_->tick();
  }
  static double seconds(std::chrono::milliseconds d) { return d.count() / 1000.0; }
  void result(const std::string& worker, const std::string& job_id, int rank, int attempt,
              v1::RankFailureCause cause = v1::RANK_FAILURE_UNSPECIFIED,
              const std::string& error = "") {
    v1::WorkerMessage message;
    message.set_job_id(job_id);
    auto* r = message.mutable_result();
    r->set_job_id(job_id);
    r->set_rank(rank);
    r->set_attempt(attempt);
    r->set_succeeded(cause == v1::RANK_FAILURE_UNSPECIFIED);
    r->set_cause(cause);
    r->set_error(error);
    r->set_named_rank(-1);
    if (rank == 0) r->set_result_json("{\"rank\":0}");
    manager_->on_message(worker, message);
  }
  // Rank `rank` of attempt 0 reports its failure: the cause, the rank it names and its error.
  void report_failure(
      const std::string& worker, const std::string& job_id, int rank, v1::RankFailureCause cause,
      int named_rank, const std::string& error,
      v1::CollectiveFailureCause collective_cause = v1::COLLECTIVE_FAILURE_UNSPECIFIED) {
    v1::WorkerMessage message;
    message.set_job_id(job_id);
    auto* r = message.mutable_result();
    r->set_job_id(job_id);
    r->set_rank(rank);
    r->set_cause(cause);
    r->set_collective_cause(collective_cause);
    r->set_named_rank(named_rank);
    r->set_error(error);
    manager_->on_message(worker, message);
  }
  void step(const std::string& worker, const std::string& job_id, int rank, int64_t step_index,
            double compute_seconds, int attempt = 0) {
    v1::WorkerMessage message;
    message.set_job_id(job_id);
    auto* s = message.mutable_step();
    s->set_rank(rank);
    s->set_step(step_index);
    s->set_attempt(attempt);
    s->set_step_seconds(compute_seconds + 0.01);
    s->set_exposed_comm_seconds(0.01);
    manager_->on_message(worker, message);
  }
  std::vector<v1::Incident> incidents(const std::string& id, const std::string& kind) {
    std::vector<v1::Incident> out;
    for (const auto& i : job(id).incidents()) {
      if (i.kind() == kind) out.push_back(i);
    }
    return out;
  }

  std::string path_;
  CoordinatorOptions options_;
  FakeClock clock_;
  int changes_ = 0;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<JobManager> manager_;
  std::map<std::string, std::shared_ptr<FakeLink>> links_;
};

TEST_F(JobManagerTest, AJobWaitsSayingWhyThenStartsOnIdleWorkersInRegistrationOrder) {
  add_worker("w0");
  const std::string id = submit(ddp_spec(2));
  EXPECT_EQ(job(id).state(), v1::PENDING);
  EXPECT_EQ(job(id).pending_reason(),
            "waiting for 2 idle workers offering gloo: 1 registered, 1 idle; never fits the 1 "
            "registered workers offering gloo: later jobs that fit start first");
  add_worker("w1");
  ASSERT_EQ(job(id).state(), v1::RUNNING);
  for (int rank = 0; rank < 2; ++rank) {
    const auto assigned = links_["w" + std::to_string(rank)]->assignments();
    ASSERT_EQ(assigned.size(), 1u);
    EXPECT_EQ(assigned[0].rank(), rank);
    EXPECT_EQ(assigned[0].world_size(), 2);
    EXPECT_EQ(assigned[0].attempt(), 0);
    EXPECT_EQ(assigned[0].master_addr(), "10.0.0.1");  // rank 0's advertised host
    EXPECT_EQ(assigned[0].master_port(), 29500);
  }
  EXPECT_TRUE(job(id).pending_reason().empty());
  EXPECT_GT(changes_, 0);  // watchers were woken
  result("w0", id, 0, 0);
  EXPECT_EQ(job(id).state(), v1::RUNNING);  // one rank of two
  result("w1", id, 1, 0);
  EXPECT_EQ(job(id).state(), v1::SUCCEEDED);
  EXPECT_EQ(job(id).result_json(), "{\"rank\":0}");
  EXPECT_EQ(job(id).ranks(1).state(), v1::RANK_SUCCEEDED);
}

TEST_F(JobManagerTest, ALostWorkerFailsItsJobAndTheOtherRanksAreCancelled) {
  FakeLink& w0 = add_worker("w0");
  FakeLink& w1 = add_worker("w1");
  const std::string id = submit(ddp_spec(2));
  manager_->lost("w1", &w1, "its connection broke");
  EXPECT_EQ(job(id).state(), v1::RUNNING);  // its rank may train on: the job is the evidence
  clock_.advance(14.5);
  manager_->tick();
  EXPECT_EQ(job(id).state(), v1::RUNNING);
  clock_.advance(1.0);
  manager_->tick();
  EXPECT_EQ(job(id).state(), v1::FAILED);
  EXPECT_EQ(job(id).error(),
            "worker w1 (rank 1) lost: its connection broke, and its job has not advanced for "
            "15.5 s");
  EXPECT_EQ(job(id).ranks(1).state(), v1::RANK_LOST);
  EXPECT_EQ(w0.cancels(id), 1);
  EXPECT_EQ(w1.cancels(id), 0);
  result("w0", id, 0, 0, v1::RANK_FAILURE_CANCELLED, "cancelled");
  EXPECT_EQ(job(id).ranks(0).state(), v1::RANK_CANCELLED);
  v1::ListWorkersReply workers;
  manager_->list_workers(&workers);
  EXPECT_EQ(workers.workers(0).state(), v1::IDLE);
  EXPECT_EQ(workers.workers(1).state(), v1::LOST);
}

TEST_F(JobManagerTest, ASilentWorkerIsDisconnectedAfterTheWorkerTimeoutAndTheLossNamesTheSilence) {
  FakeLink& w0 = add_worker("w0");
  clock_.advance(15.0);  // exactly the timeout: not yet
  manager_->tick();
  EXPECT_FALSE(w0.disconnected);
  clock_.advance(1.0);
  manager_->tick();
  EXPECT_TRUE(w0.disconnected);
  EXPECT_EQ(manager_->silence("w0"),
            "no heartbeat for 16.0 s (--worker-timeout 15.0 s): the worker is stopped, hung or "
            "cut off");
  // A heartbeat in time keeps another worker: its session is not ended.
  FakeLink& w1 = add_worker("w1");
  clock_.advance(10.0);
  v1::WorkerMessage heartbeat;
  heartbeat.set_heartbeat(true);
  manager_->on_message("w1", heartbeat);
  clock_.advance(10.0);
  manager_->tick();
  EXPECT_FALSE(w1.disconnected);
}

TEST_F(JobManagerTest, AFailedRankRestartsTheJobFromItsCheckpointWithoutTheInjection) {
  auto spec = ddp_spec(2);
  spec.mutable_ddp()->set_max_restarts(1);
  spec.mutable_ddp()->set_checkpoint_dir("/ckpt");
  spec.mutable_ddp()->set_inject("exit:rank=1,step=3");
  spec.mutable_ddp()->set_shard_optimizer(true);  // ZeRO-1's lost shards do not heal in place
  FakeLink& w0 = add_worker("w0");
  FakeLink& w1 = add_worker("w1");
  const std::string id = submit(spec);
  for (int rank = 0; rank < 2; ++rank) step("w" + std::to_string(rank), id, rank, 1, 0.1);
  for (int rank = 0; rank < 2; ++rank) {
    v1::WorkerMessage message;
    message.set_job_id(id);
    message.mutable_step()->set_rank(rank);
    message.mutable_step()->set_step(2);
    message.mutable_step()->set_checkpoint_seconds(0.5);
    manager_->on_message("w" + std::to_string(rank), message);
  }
  result("w1", id, 1, 0, v1::RANK_FAILURE_PROCESS_EXITED, "its process exited with status 3");
  EXPECT_EQ(job(id).state(), v1::PENDING);
  EXPECT_EQ(w0.cancels(id), 1);  // w1 reported its own failure and is idle
  EXPECT_TRUE(w0.assignments().size() == 1);
  // The cancelled rank's result belongs to attempt 0: it frees w0, and the restart starts.
  result("w0", id, 0, 0, v1::RANK_FAILURE_CANCELLED, "cancelled");
  ASSERT_EQ(job(id).state(), v1::RUNNING);
  EXPECT_EQ(job(id).attempts(), 2);
  const v1::Assignment next = w1.assignments().back();
  EXPECT_EQ(next.attempt(), 1);
  EXPECT_EQ(next.spec().ddp().resume(), "auto");
  EXPECT_TRUE(next.spec().ddp().inject().empty());
  EXPECT_EQ(job(id).spec().ddp().inject(), "exit:rank=1,step=3");  // the job's own spec keeps it
  const auto restarts = incidents(id, "restart");
  ASSERT_EQ(restarts.size(), 1u);
  EXPECT_EQ(restarts[0].message(),
            "restart 1 of 1 after: rank 1 (worker w1) failed: its process exited with status 3; "
            "world size 2 → 2, resuming step-3 (/ckpt)");
  // A stale attempt-0 step report is ignored; attempt 1's count.
  step("w0", id, 0, 3, 0.1, /*attempt=*/0);
  EXPECT_EQ(job(id).ranks(0).progress().step(), 0);
  step("w0", id, 0, 3, 0.1, /*attempt=*/1);
  EXPECT_EQ(job(id).ranks(0).progress().step(), 3);
  // With no restarts left, the next failure fails the job.
  result("w0", id, 0, 1, v1::RANK_FAILURE_ERROR, "boom");
  EXPECT_EQ(job(id).state(), v1::FAILED);
  EXPECT_EQ(job(id).error(), "rank 0 (worker w0) failed: boom");
}

// Healing (protocol step 8): a killed rank's number goes to the idle worker, the survivors are
// told the new group generation and keep running, and nothing is cancelled or restarted.
TEST_F(JobManagerTest, AKilledRankIsHealedInPlaceByAnIdleWorker) {
  auto spec = ddp_spec(3);
  spec.mutable_ddp()->set_max_restarts(1);
  FakeLink& w0 = add_worker("w0");
  FakeLink& w1 = add_worker("w1");
  FakeLink& w2 = add_worker("w2");
  FakeLink& spare = add_worker("w3");
  const std::string id = submit(spec);
  ASSERT_EQ(job(id).state(), v1::RUNNING);
  result("w1", id, 1, 0, v1::RANK_FAILURE_PROCESS_KILLED, "its process was killed by SIGKILL");
  EXPECT_EQ(job(id).state(), v1::RUNNING);
  EXPECT_EQ(job(id).attempts(), 1);
  EXPECT_EQ(job(id).worker_ids(1), "w3");
  EXPECT_EQ(job(id).ranks(1).state(), v1::RANK_RUNNING);
  for (const FakeLink* survivor : {&w0, &w2}) {
    EXPECT_EQ(survivor->cancels(id), 0);
    ASSERT_EQ(survivor->heals().size(), 1u);
    const v1::HealGroup heal = survivor->heals()[0];
    EXPECT_EQ(heal.generation(), 1);
    EXPECT_EQ(heal.lost_rank(), 1);
    EXPECT_EQ(heal.master_addr(), "10.0.0.1");  // rank 0 lives: its store stays
  }
  EXPECT_TRUE(w1.heals().empty());
  ASSERT_EQ(spare.assignments().size(), 1u);
  const v1::Assignment joined = spare.assignments()[0];
  EXPECT_EQ(joined.rank(), 1);
  EXPECT_EQ(joined.world_size(), 3);
  EXPECT_EQ(joined.attempt(), 0);
  EXPECT_EQ(joined.join_generation(), 1);
  EXPECT_EQ(joined.master_addr(), "10.0.0.1");
  const auto heals = incidents(id, "heal");
  ASSERT_EQ(heals.size(), 1u);
  EXPECT_EQ(heals[0].rank(), 1);
  EXPECT_NE(heals[0].message().find("after: rank 1 (worker w1) failed: "), std::string::npos)
      << heals[0].message();
  EXPECT_NE(heals[0].message().find("worker w3 takes rank 1 in group generation 1"),
            std::string::npos)
      << heals[0].message();
  // The first step every rank completes after the heal closes it; then the job ends as usual.
  clock_.advance(1.5);
  for (int rank = 0; rank < 3; ++rank) step(job(id).worker_ids(rank), id, rank, 4, 0.1);
  const auto healed = incidents(id, "healed");
  ASSERT_EQ(healed.size(), 1u);
  EXPECT_NE(healed[0].message().find("completed step 4, 1.50 s after the loss was seen"),
            std::string::npos)
      << healed[0].message();
  EXPECT_EQ(manager_->state_counts().heals_started, 1);
  EXPECT_EQ(manager_->state_counts().heal_seconds, std::vector<double>{1.5});
  for (int rank = 0; rank < 3; ++rank) result(job(id).worker_ids(rank), id, rank, 0);
  EXPECT_EQ(job(id).state(), v1::SUCCEEDED);
  // A second loss finds --max-restarts 1 used up by the heal.
  EXPECT_FALSE(policy_heals(job(id)));
}

// Rank 0 serves the store: when its worker is lost, the new generation meets at the spare's.
TEST_F(JobManagerTest, LosingRankZerosWorkerMovesTheStoreToTheSpare) {
  auto spec = ddp_spec(2);
  spec.mutable_ddp()->set_max_restarts(2);
  FakeLink& w0 = add_worker("w0");
  FakeLink& w1 = add_worker("w1");
  FakeLink& spare = add_worker("w2");
  const std::string id = submit(spec);
  lose("w0", "its connection broke");
  EXPECT_EQ(job(id).state(), v1::RUNNING);
  ASSERT_EQ(w1.heals().size(), 1u);
  EXPECT_EQ(w1.heals()[0].master_addr(), "10.0.0.3");
  ASSERT_EQ(spare.assignments().size(), 1u);
  EXPECT_EQ(spare.assignments()[0].rank(), 0);
  EXPECT_EQ(spare.assignments()[0].master_addr(), "10.0.0.3");
  EXPECT_NE(incidents(id, "heal")
                .at(0)
                .message()
                .find("worker w0 (rank 0) lost: its connection "
                      "broke"),
            std::string::npos);
}

// A second loss before the heal's `healed` incident (here: a survivor, which may have been the
// state's source) is not healed again, though restarts and idle workers are left: the job
// restarts, and its reason names the heal it interrupted. Once healed, a loss heals again.
TEST_F(JobManagerTest, ALossWhileAHealIsUnderWayRestartsTheJobInstead) {
  auto spec = ddp_spec(3);
  spec.mutable_ddp()->set_max_restarts(3);
  FakeLink& w0 = add_worker("w0");
  add_worker("w1");
  add_worker("w2");
  add_worker("w3");
  add_worker("w4");
  const std::string id = submit(spec);
  result("w1", id, 1, 0, v1::RANK_FAILURE_PROCESS_KILLED, "its process was killed by SIGKILL");
  ASSERT_EQ(incidents(id, "heal").size(), 1u);
  result("w0", id, 0, 0, v1::RANK_FAILURE_PROCESS_EXITED, "its process exited with status 3");
  EXPECT_EQ(incidents(id, "heal").size(), 1u) << "healed twice";
  EXPECT_EQ(w0.heals().size(), 1u) << "a second HealGroup was sent";
  ASSERT_EQ(job(id).attempts(), 2);  // restarted at once on the idle workers
  const auto restarts = incidents(id, "restart");
  ASSERT_EQ(restarts.size(), 1u);
  EXPECT_NE(restarts[0].message().find(
                "after: rank 0 (worker w0) failed: its process exited with status 3 (during heal "
                "1: no second heal is tried)"),
            std::string::npos)
      << restarts[0].message();
  // The old attempt's ranks end cancelled and are idle again; the new attempt heals a loss.
  result("w2", id, 2, 0, v1::RANK_FAILURE_CANCELLED, "cancelled");
  result("w3", id, 1, 0, v1::RANK_FAILURE_CANCELLED, "cancelled");
  for (int rank = 0; rank < 3; ++rank) step(job(id).worker_ids(rank), id, rank, 0, 0.1, 1);
  const std::string lost = job(id).worker_ids(2);
  result(lost, id, 2, 1, v1::RANK_FAILURE_PROCESS_KILLED, "its process was killed by SIGKILL");
  EXPECT_EQ(incidents(id, "heal").size(), 2u);
  EXPECT_EQ(job(id).attempts(), 2);
}

TEST_F(JobManagerTest, ARankThatFailedInsteadOfDyingIsNotHealed) {
  auto spec = ddp_spec(2);
  spec.mutable_ddp()->set_max_restarts(1);
  add_worker("w0");
  FakeLink& w1 = add_worker("w1");
  add_worker("w2");
  const std::string id = submit(spec);
  // An error the rank reported itself (a bad shape, a NaN check) would fail again in its place.
  result("w1", id, 1, 0, v1::RANK_FAILURE_ERROR, "param spread 3.0 exceeds --max-param-spread");
  // Restarted on the two idle workers (w1, back from its failure, and w2) while w0 is cancelled.
  EXPECT_EQ(job(id).state(), v1::RUNNING);
  EXPECT_EQ(job(id).attempts(), 2);
  EXPECT_EQ(incidents(id, "restart").size(), 1u);
  EXPECT_TRUE(incidents(id, "heal").empty());
  EXPECT_TRUE(w1.heals().empty());
}

// ZeRO-1's lost shard exists nowhere else unless --shard-replicas 1 keeps a copy on the next
// rank: without it the job restarts from its checkpoint, with it the job heals in place.
v1::JobSpec zero1_spec(int replicas) {
  auto spec = ddp_spec(3);
  spec.mutable_ddp()->set_max_restarts(1);
  spec.mutable_ddp()->set_shard_optimizer(true);
  spec.mutable_ddp()->set_shard_replicas(replicas);
  return spec;
}

TEST_F(JobManagerTest, ShardedOptimizerStateWithoutReplicasRestartsInsteadOfHealing) {
  add_worker("w0");
  FakeLink& w1 = add_worker("w1");
  add_worker("w2");
  add_worker("w3");
  const std::string id = submit(zero1_spec(0));
  result("w1", id, 1, 0, v1::RANK_FAILURE_PROCESS_KILLED, "killed by SIGKILL");
  EXPECT_TRUE(incidents(id, "heal").empty());
  EXPECT_TRUE(w1.heals().empty());
  EXPECT_EQ(job(id).state(), v1::PENDING) << "restarting once the survivors are stopped";
}

TEST_F(JobManagerTest, ShardedOptimizerStateWithReplicasHealsInPlace) {
  FakeLink& w0 = add_worker("w0");
  add_worker("w1");
  add_worker("w2");
  add_worker("w3");
  const std::string id = submit(zero1_spec(1));
  result("w1", id, 1, 0, v1::RANK_FAILURE_PROCESS_KILLED, "killed by SIGKILL");
  EXPECT_EQ(job(id).state(), v1::RUNNING);
  EXPECT_EQ(incidents(id, "heal").size(), 1u);
  EXPECT_EQ(job(id).attempts(), 1);
  EXPECT_EQ(job(id).worker_ids(1), "w3");
  EXPECT_EQ(w0.heals().size(), 1u);
}

TEST_F(JobManagerTest, ARestartShrinksToTheLargestSizeThatIdleWorkersAllowDownToTheMinimum) {
  auto spec = ddp_spec(3);
  spec.mutable_ddp()->set_max_restarts(1);
  spec.mutable_ddp()->set_min_world_size(2);
  spec.mutable_ddp()->set_no_heal(true);  // else it shrinks in place (the test below)
  add_worker("w0");
  FakeLink& w1 = add_worker("w1");
  add_worker("w2");
  const std::string id = submit(spec);
  lose("w1", "its connection broke");
  ASSERT_EQ(job(id).state(), v1::PENDING);
  result("w0", id, 0, 0, v1::RANK_FAILURE_CANCELLED);
  EXPECT_EQ(job(id).state(), v1::PENDING);  // one idle worker, under --min-world-size: waits
  result("w2", id, 2, 0, v1::RANK_FAILURE_CANCELLED);
  ASSERT_EQ(job(id).state(), v1::RUNNING);
  ASSERT_EQ(job(id).worker_ids_size(), 2);
  EXPECT_EQ(job(id).worker_ids(0), "w0");
  EXPECT_EQ(job(id).worker_ids(1), "w2");
  EXPECT_EQ(links_["w2"]->assignments().back().world_size(), 2);
  EXPECT_NE(incidents(id, "restart").at(0).message().find("world size 3 → 2, from the start"),
            std::string::npos);
}

// No idle worker, and --min-world-size allows one rank fewer: the survivors go on in place,
// renumbered, and the job ends when the two of them have.
TEST_F(JobManagerTest, ALostWorkerWithNoSpareShrinksTheJobInPlace) {
  const auto spec = shrinkable_spec();
  FakeLink& w0 = add_worker("w0");
  FakeLink& w1 = add_worker("w1");
  FakeLink& w2 = add_worker("w2");
  const std::string id = submit(spec);
  lose("w1", "its connection broke");
  ASSERT_EQ(job(id).state(), v1::RUNNING);
  EXPECT_EQ(job(id).attempts(), 1) << "no restart";
  ASSERT_EQ(job(id).worker_ids_size(), 2);
  EXPECT_EQ(job(id).worker_ids(1), "w2");
  ASSERT_EQ(job(id).ranks_size(), 2);
  EXPECT_EQ(job(id).ranks(1).rank(), 1);
  EXPECT_EQ(job(id).ranks(1).worker_id(), "w2");
  for (const FakeLink* survivor : {&w0, &w2}) {
    EXPECT_EQ(survivor->cancels(id), 0);
    ASSERT_EQ(survivor->heals().size(), 1u);
    EXPECT_EQ(survivor->heals()[0].world_size(), 2);
    EXPECT_EQ(survivor->heals()[0].lost_rank(), 1);
    EXPECT_EQ(survivor->heals()[0].generation(), 1);
  }
  EXPECT_EQ(rank_after_heal(w2.heals()[0], 3, 2), 1);
  EXPECT_EQ(rank_after_heal(w0.heals()[0], 3, 0), 0);
  const auto heals = incidents(id, "heal");
  ASSERT_EQ(heals.size(), 1u);
  EXPECT_EQ(heals[0].rank(), 1);
  EXPECT_NE(heals[0].message().find("no idle worker replaces rank 1: the 2 survivors go on"),
            std::string::npos)
      << heals[0].message();
  // Steps complete with two reports now, under the new numbers.
  clock_.advance(0.5);
  step("w0", id, 0, 3, 0.1);
  step("w2", id, 1, 3, 0.1);
  EXPECT_EQ(incidents(id, "healed").size(), 1u);
  result("w0", id, 0, 0);
  result("w2", id, 1, 0);
  EXPECT_EQ(job(id).state(), v1::SUCCEEDED);
}

// The steps before a shrink were reported by 3 ranks, those after it by 2: a coordinator that
// starts again on the store replays every one of them.
TEST_F(JobManagerTest, StepsFromBeforeAndAfterAShrinkAreReplayedAfterACoordinatorRestart) {
  add_worker("w0");
  FakeLink& w1 = add_worker("w1");
  add_worker("w2");
  const std::string id = submit(shrinkable_spec());
  for (int s = 0; s < 3; ++s) {
    for (int rank = 0; rank < 3; ++rank) step(job(id).worker_ids(rank), id, rank, s, 0.1);
  }
  lose("w1", "its connection broke");
  for (int s = 3; s < 5; ++s) {
    for (int rank = 0; rank < 2; ++rank) step(job(id).worker_ids(rank), id, rank, s, 0.1);
  }
  manager_->stop();
  links_.clear();
  open();
  std::vector<int64_t> replayed;
  for (const auto& e : *manager_->events(id)) {
    if (e.has_step()) replayed.push_back(e.step().step());
  }
  EXPECT_EQ(replayed, (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

// Rank 0's process served the store: the survivors renumber, and the new rank 0 (old rank 1)
// serves generation 1's store on its worker's rendezvous port.
TEST_F(JobManagerTest, ShrinkingWithoutRankZeroMovesTheStoreToTheNewRankZero) {
  const auto spec = shrinkable_spec();
  FakeLink& w0 = add_worker("w0");
  FakeLink& w1 = add_worker("w1");
  FakeLink& w2 = add_worker("w2");
  const std::string id = submit(spec);
  lose("w0", "its connection broke");
  ASSERT_EQ(job(id).state(), v1::RUNNING);
  ASSERT_EQ(job(id).worker_ids_size(), 2);
  EXPECT_EQ(job(id).worker_ids(0), "w1");
  for (const FakeLink* survivor : {&w1, &w2}) {
    ASSERT_EQ(survivor->heals().size(), 1u);
    EXPECT_EQ(survivor->heals()[0].master_addr(), "10.0.0.2");
    EXPECT_EQ(survivor->heals()[0].master_port(), 29500);
    EXPECT_EQ(survivor->heals()[0].world_size(), 2);
  }
  EXPECT_EQ(rank_after_heal(w1.heals()[0], 3, 1), 0);
  EXPECT_NE(incidents(id, "heal").at(0).message().find("(store 10.0.0.2:29500)"), std::string::npos)
      << incidents(id, "heal").at(0).message();
}

// Where the survivors cannot go on one rank fewer, the job restarts as before: ZeRO-1's shards
// are laid out for the old world, the batch must split, --min-world-size must allow it.
TEST_F(JobManagerTest, AShrinkInPlaceNeedsAStateTheSurvivorsHoldAndABatchThatSplits) {
  const auto spec = shrinkable_spec();
  v1::Job job;
  *job.mutable_spec() = spec;
  job.set_attempts(1);
  for (const char* id : {"w0", "w1"}) job.add_worker_ids(id);
  EXPECT_FALSE(policy_shrinks(job, 1)) << "below --min-world-size";
  job.add_worker_ids("w2");
  EXPECT_TRUE(policy_shrinks(job, 1));
  EXPECT_TRUE(policy_shrinks(job, 2));
  EXPECT_TRUE(policy_shrinks(job, 0)) << "the new rank 0 serves the store";
  job.mutable_spec()->mutable_ddp()->set_batch_size(9);
  EXPECT_FALSE(policy_shrinks(job, 1)) << "--batch 9 over 2 ranks";
  job.mutable_spec()->mutable_ddp()->set_batch_size(12);
  job.mutable_spec()->mutable_ddp()->set_grad_accum(4);
  EXPECT_FALSE(policy_shrinks(job, 1)) << "--batch 12 over 2 ranks x --grad-accum 4";
  job.mutable_spec()->mutable_ddp()->set_grad_accum(2);
  EXPECT_TRUE(policy_shrinks(job, 1));
  job.mutable_spec()->mutable_ddp()->set_shard_optimizer(true);
  EXPECT_FALSE(policy_shrinks(job, 1)) << "ZeRO-1 without replicas: rank 1's shard is lost";
  job.mutable_spec()->mutable_ddp()->set_shard_replicas(1);
  EXPECT_TRUE(policy_shrinks(job, 1)) << "rank 1's shard is on rank 2, and is laid out again";
  job.mutable_spec()->mutable_ddp()->set_shard_optimizer(false);
  job.mutable_spec()->mutable_ddp()->set_strategy("fsdp");
  EXPECT_TRUE(policy_heals(job)) << "fsdp with --shard-replicas 1 heals with a spare";
  EXPECT_TRUE(policy_shrinks(job, 1)) << "fsdp's shards are laid out again from the copies";
  job.mutable_spec()->mutable_ddp()->set_shard_replicas(0);
  EXPECT_FALSE(policy_heals(job)) << "fsdp without replicas: rank 1's shards are lost";
  job.mutable_spec()->mutable_ddp()->set_strategy("bucketed");
  job.mutable_spec()->mutable_ddp()->set_min_world_size(0);
  EXPECT_FALSE(policy_shrinks(job, 1)) << "no --min-world-size";
}

TEST_F(JobManagerTest, AStallIsReportedOnceNamingTheRankThatHasNotJoinedAndFailsTheJob) {
  auto spec = ddp_spec(2);
  spec.mutable_ddp()->set_stall_seconds(30);
  add_worker("w0");
  add_worker("w1");
  const std::string id = submit(spec);
  // Rank 0 waits in all_reduce #7; rank 1 completed #6 and is somewhere else.
  v1::WorkerMessage beat;
  beat.set_job_id(id);
  beat.set_heartbeat(true);
  auto* progress = beat.mutable_progress();
  progress->set_phase("sync");
  progress->set_step(4);
  progress->set_last_enqueued(7);
  progress->set_last_completed(6);
  progress->mutable_oldest_pending()->set_seq(7);
  progress->mutable_oldest_pending()->set_op("all_reduce");
  v1::WorkerMessage elsewhere = beat;
  elsewhere.mutable_progress()->set_phase("forward");
  elsewhere.mutable_progress()->set_last_enqueued(6);
  elsewhere.mutable_progress()->clear_oldest_pending();
  manager_->on_message("w0", beat);
  manager_->on_message("w1", elsewhere);
  clock_.advance(29.0);
  manager_->tick();
  EXPECT_TRUE(incidents(id, "stall").empty());
  clock_.advance(2.0);
  // Heartbeats without progress keep the workers alive and do not end the stall.
  manager_->on_message("w0", beat);
  manager_->on_message("w1", elsewhere);
  manager_->tick();
  const auto stalls = incidents(id, "stall");
  ASSERT_EQ(stalls.size(), 1u);
  EXPECT_EQ(stalls[0].rank(), 1);
  EXPECT_EQ(job(id).state(), v1::FAILED);  // --on-stall fail, the default
  EXPECT_EQ(job(id).error(), stalls[0].message());
}

TEST_F(JobManagerTest, UnderOnStallWarnAStallIsReportedOncePerEpisodeAndTheJobGoesOn) {
  auto spec = ddp_spec(2);
  spec.mutable_ddp()->set_stall_seconds(30);
  spec.mutable_ddp()->set_on_stall("warn");
  add_worker("w0");
  add_worker("w1");
  const std::string id = submit(spec);
  for (int i = 0; i < 3; ++i) {  // 90 s without progress: one episode, one incident
    clock_.advance(30.0);
    manager_->tick();
  }
  EXPECT_EQ(incidents(id, "stall").size(), 1u);
  EXPECT_EQ(job(id).state(), v1::RUNNING);
  step("w0", id, 0, 0, 0.1);  // progress ends the episode; the next stall is a new one
  clock_.advance(31.0);
  manager_->tick();
  EXPECT_EQ(incidents(id, "stall").size(), 2u);
  EXPECT_EQ(job(id).state(), v1::RUNNING);
}

TEST_F(JobManagerTest, PendingJobsSayWhyTheyWaitAndACancelledOneNoLongerDoes) {
  add_worker("w0");
  add_worker("w1");
  add_worker("w2");
  const std::string running = submit(ddp_spec(2));  // on w0 and w1
  ASSERT_EQ(job(running).state(), v1::RUNNING);
  const std::string first = submit(ddp_spec(3));  // fits once `running` ends
  const std::string behind = submit(ddp_spec(1));
  EXPECT_EQ(job(first).pending_reason(),
            "waiting for 3 idle workers offering gloo: 3 registered, 1 idle");
  EXPECT_EQ(job(behind).pending_reason(), "queued behind " + first);  // FIFO: no overtaking
  EXPECT_EQ(job(behind).state(), v1::PENDING);
  add_worker("w3");
  EXPECT_EQ(job(first).pending_reason(),
            "waiting for 3 idle workers offering gloo: 4 registered, 2 idle");
  manager_->lost("w3", links_["w3"].get(), "it closed its session");
  EXPECT_EQ(job(first).pending_reason(),
            "waiting for 3 idle workers offering gloo: 3 registered, 1 idle");
  v1::Job cancelled;
  ASSERT_FALSE(manager_->cancel(first, &cancelled).has_value());
  EXPECT_TRUE(job(first).pending_reason().empty());
  EXPECT_EQ(job(behind).state(), v1::RUNNING);  // the oldest pending job is gone
}

// Backfill (docs/job-path.md): a job with more ranks than registered workers blocks no one, and
// says so; once a worker registers that lets it fit, it blocks the jobs behind it again (FIFO).
TEST_F(JobManagerTest, AJobLargerThanTheClusterDoesNotBlockJobsThatFit) {
  add_worker("w0");
  add_worker("w1");
  const std::string big = submit(ddp_spec(3));
  const std::string small = submit(ddp_spec(2));
  EXPECT_EQ(job(big).state(), v1::PENDING);
  ASSERT_EQ(job(small).state(), v1::RUNNING);  // started at once, ahead of `big`
  EXPECT_EQ(job(small).worker_ids_size(), 2);
  EXPECT_EQ(job(big).pending_reason(),
            "waiting for 3 idle workers offering gloo: 2 registered, 0 idle; never fits the 2 "
            "registered workers offering gloo: later jobs that fit start first");
  add_worker("w2");  // now `big` fits once `small` ends, so it blocks `later`
  const std::string later = submit(ddp_spec(1));
  EXPECT_EQ(job(later).state(), v1::PENDING);
  EXPECT_EQ(job(later).pending_reason(), "queued behind " + big);
  EXPECT_EQ(job(big).pending_reason(),
            "waiting for 3 idle workers offering gloo: 3 registered, 1 idle");
  result("w0", small, 0, 0);
  result("w1", small, 1, 0);
  ASSERT_EQ(job(small).state(), v1::SUCCEEDED);
  EXPECT_EQ(job(big).state(), v1::RUNNING);
  EXPECT_EQ(job(later).pending_reason(),  // no idle worker left
            "waiting for 1 idle workers offering gloo: 3 registered, 0 idle");
  // Watchers get each reason once, when it changes, in order.
  std::vector<std::string> reasons;
  for (const auto& e : *manager_->events(big)) {
    if (e.has_pending()) reasons.push_back(e.pending().reason());
  }
  EXPECT_EQ(
      reasons,
      (std::vector<std::string>{
          "waiting for 3 idle workers offering gloo: 2 registered, 2 idle; never fits the 2 "
          "registered workers offering gloo: later jobs that fit start first",
          "waiting for 3 idle workers offering gloo: 2 registered, 0 idle; never fits the 2 "
          "registered workers offering gloo: later jobs that fit start first",
          "waiting for 3 idle workers offering gloo: 3 registered, 1 idle",
          "waiting for 3 idle workers offering gloo: 3 registered, 2 idle"}));  // rank 0 ended
}

TEST_F(JobManagerTest, AStragglerIsNamedOnceAndTheHealthyRanksAreNot) {
  auto spec = ddp_spec(3);
  add_worker("w0");
  add_worker("w1");
  add_worker("w2");
  const std::string id = submit(spec);
  // Rank 2 computes 3x the others from step 0: named at step 29, when 3 blocks of 10 steps hold
  // its excess (StragglerRule); its score 1/3 is below 0.75, the default threshold.
  for (int64_t s = 0; s < 30; ++s) {
    for (int rank = 0; rank < 3; ++rank) {
      step("w" + std::to_string(rank), id, rank, s, rank == 2 ? 0.3 : 0.1);
    }
  }
  const auto stragglers = incidents(id, "straggler");
  ASSERT_EQ(stragglers.size(), 1u);
  EXPECT_EQ(stragglers[0].rank(), 2);
  // The score is 1 / (rank 2's compute / the others' median), each compute being step_seconds
  // less exposed_comm_seconds as the reports carry them, through exp(-ln(ratio)): a few ulps of
  // 1/3, so 1e-12 is loose.
  const double slow = (0.3 + 0.01) - 0.01, median = (0.1 + 0.01) - 0.01;
  EXPECT_NEAR(job(id).ranks(2).compute_score(), 1.0 / (slow / median), 1e-12);
  EXPECT_EQ(job(id).ranks(0).compute_score(), 1.0);
  // One aggregated step event per complete step.
  int steps = 0;
  for (const auto& e : *manager_->events(id)) steps += e.has_step();
  EXPECT_EQ(steps, 30);
}

TEST_F(JobManagerTest, ADesyncIsRecordedAsAnIncidentNamingTheRankTheRanksReport) {
  add_worker("w0");
  add_worker("w1");
  const std::string id = submit(ddp_spec(2));
  report_failure("w0", id, 0, v1::RANK_FAILURE_DESYNC, 1,
                 "collective #12: rank 1 launched broadcast, rank 0 all_reduce");
  const auto desyncs = incidents(id, "desync");
  ASSERT_EQ(desyncs.size(), 1u);
  EXPECT_EQ(desyncs[0].rank(), 1);
  EXPECT_EQ(job(id).state(), v1::FAILED);
  EXPECT_EQ(job(id).error(),
            "rank 0 (worker w0) failed: collective desync (--check-collectives): collective #12: "
            "rank 1 launched broadcast, rank 0 all_reduce");
}

// A rank's failure is kept on its RankStatus as the rank reported it: the cause, the
// collective's cause and the rank it names, as data, where the API's users read them.
TEST_F(JobManagerTest, AFailedRanksCauseAndNamedRankAreKeptAsData) {
  add_worker("w0");
  add_worker("w1");
  const std::string id = submit(ddp_spec(2));
  report_failure("w0", id, 0, v1::RANK_FAILURE_COLLECTIVE, 1,
                 "collective all_reduce/bucket0 failed: a peer rank closed its connection",
                 v1::COLLECTIVE_FAILURE_PEER_EXITED);
  ASSERT_EQ(job(id).state(), v1::FAILED);
  const v1::RankStatus& rank0 = job(id).ranks(0);
  EXPECT_EQ(rank0.state(), v1::RANK_FAILED);
  EXPECT_EQ(rank0.failure_cause(), v1::RANK_FAILURE_COLLECTIVE);
  EXPECT_EQ(rank0.collective_cause(), v1::COLLECTIVE_FAILURE_PEER_EXITED);
  EXPECT_EQ(rank0.named_rank(), 1);
  EXPECT_EQ(job(id).ranks(1).failure_cause(), v1::RANK_FAILURE_UNSPECIFIED);  // not reported
}

TEST_F(JobManagerTest, APendingJobFailsAfterThePendingTimeoutAndACancelStopsItsRanks) {
  options_.pending_timeout = std::chrono::seconds(60);
  open();
  add_worker("w0");
  FakeLink& w1 = add_worker("w1");
  const std::string occupying = submit(ddp_spec(1));  // on w0
  const std::string waiting = submit(ddp_spec(2));    // fits once `occupying` ends
  clock_.advance(30.0);
  const std::string running = submit(ddp_spec(1));  // queued behind it, FIFO
  EXPECT_EQ(job(running).state(), v1::PENDING);
  v1::WorkerMessage heartbeat;
  heartbeat.set_heartbeat(true);
  manager_->on_message("w0", heartbeat);
  clock_.advance(31.0);
  manager_->tick();
  EXPECT_EQ(job(waiting).state(), v1::FAILED);
  EXPECT_EQ(job(waiting).error(), "waited 60 s for 2 idle workers offering gloo; 1 idle");
  ASSERT_EQ(job(running).state(), v1::RUNNING);  // started as soon as the job ahead failed
  v1::Job cancelled;
  EXPECT_FALSE(manager_->cancel(running, &cancelled).has_value());
  EXPECT_EQ(cancelled.state(), v1::CANCELLED);
  EXPECT_EQ(w1.cancels(running), 1);
  const auto again = manager_->cancel(running, &cancelled);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->code, Refusal::Code::kFailedPrecondition);
  EXPECT_EQ(manager_->cancel("job-999999", &cancelled)->code, Refusal::Code::kNotFound);
}

TEST_F(JobManagerTest, RefusalsNameTheField) {
  options_.max_pending_jobs = 1;
  open();
  submit(ddp_spec(2));
  v1::SubmitJobRequest request;
  *request.mutable_spec() = ddp_spec(2);
  v1::Job job;
  auto refusal = manager_->submit(request, ddp_options_of(request.spec()), &job);
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->code, Refusal::Code::kResourceExhausted);
  EXPECT_EQ(refusal->message.rfind("max_pending_jobs: ", 0), 0u);
  add_worker("w0");
  v1::WorkerHello again;
  again.set_worker_id("w0");
  refusal = manager_->register_worker(again, std::make_shared<FakeLink>());
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->code, Refusal::Code::kAlreadyExists);
  EXPECT_EQ(refusal->message, "worker_id: w0 already has a live session");
}

TEST_F(JobManagerTest, AJobRunningWhenTheCoordinatorStoppedRestartsOrFailsOnTheNextStart) {
  auto restartable = ddp_spec(1);
  restartable.mutable_ddp()->set_max_restarts(1);
  add_worker("w0");
  add_worker("w1");
  const std::string plain = submit(ddp_spec(1));
  const std::string restarted = submit(restartable);
  ASSERT_EQ(job(plain).state(), v1::RUNNING);
  ASSERT_EQ(job(restarted).state(), v1::RUNNING);
  manager_->stop();
  EXPECT_TRUE(links_["w0"]->disconnected);
  manager_->lost("w0", links_["w0"].get(), "shutting down");  // changes nothing while stopping
  EXPECT_EQ(job(plain).state(), v1::RUNNING);
  links_.clear();
  options_.adopt = false;  // --no-adopt: the path before adoption
  open();                  // a new coordinator on the same store
  EXPECT_EQ(job(plain).state(), v1::FAILED);
  EXPECT_EQ(job(plain).error(), "coordinator restarted");
  EXPECT_EQ(job(restarted).state(), v1::PENDING);
  EXPECT_EQ(job(restarted).attempts(), 1);
  add_worker("w0");
  EXPECT_EQ(job(restarted).state(), v1::RUNNING);
  EXPECT_EQ(links_["w0"]->assignments().back().attempt(), 1);
}

// Sessions and adoption (protocol step 9 in job_manager.h).
class AdoptionTest : public JobManagerTest {
 protected:
  // A worker registering again with its rank (hello.claim), on a new link.
  FakeLink& reclaim(const std::string& id, const std::string& job_id, int rank, int attempt = 0,
                    int64_t last_step = 3, double session_lost = 0) {
    v1::WorkerHello hello;
    hello.set_worker_id(id);
    hello.set_advertised_host("10.0.1.1");
    hello.set_rendezvous_port(29500);
    auto* claim = hello.mutable_claim();
    claim->set_job_id(job_id);
    claim->set_attempt(attempt);
    claim->set_rank(rank);
    claim->set_last_step(last_step);
    claim->set_process_state(v1::RANK_PROCESS_RUNNING);
    claim->set_session_lost_unix_time(session_lost);
    auto link = std::make_shared<FakeLink>();
    links_[id] = link;
    EXPECT_FALSE(manager_->register_worker(hello, link).has_value());
    return *link;
  }
  // A coordinator killed (no stop(): its store as a crash leaves it) and started again.
  void crash_and_restart() {
    links_.clear();
    open();
  }
  void sequenced_step(const std::string& worker, const std::string& job_id, int rank,
                      int64_t step_index, uint64_t seq) {
    v1::WorkerMessage message;
    message.set_job_id(job_id);
    message.set_seq(seq);
    message.mutable_step()->set_rank(rank);
    message.mutable_step()->set_step(step_index);
    manager_->on_message(worker, message);
  }
  std::vector<uint64_t> acknowledgements(const FakeLink& link) {
    std::vector<uint64_t> out;
    for (const auto& m : link.sent) {
      if (m.has_acknowledged()) out.push_back(m.acknowledged());
    }
    return out;
  }
  v1::ListWorkersReply workers() {
    v1::ListWorkersReply reply;
    manager_->list_workers(&reply);
    return reply;
  }
};

TEST_F(AdoptionTest, ARestartedCoordinatorAdoptsARunningJobInTheSameAttempt) {
  add_worker("w0");
  add_worker("w1");
  const std::string id = submit(ddp_spec(2));
  step("w0", id, 0, 0, 0.1);
  step("w1", id, 1, 0, 0.1);
  step("w0", id, 0, 1, 0.1);  // step 1 half reported when the coordinator dies
  store_->flush_steps();
  crash_and_restart();
  EXPECT_EQ(job(id).state(), v1::RUNNING);
  clock_.advance(5.0);
  FakeLink& w1 = reclaim("w1", id, 1, 0, 1, clock_.unix_seconds() - 9.0);
  EXPECT_TRUE(incidents(id, "adopted").empty());  // one rank of two
  FakeLink& w0 = reclaim("w0", id, 0, 0, 1, clock_.unix_seconds() - 8.0);
  ASSERT_EQ(incidents(id, "adopted").size(), 1u);
  EXPECT_EQ(incidents(id, "adopted")[0].message(),
            "adopted: all 2 ranks claimed 5.0 s after this coordinator started; their sessions "
            "were down 9.0 s; no rank restarted");
  EXPECT_TRUE(w0.assignments().empty());  // nothing started again
  EXPECT_TRUE(w1.assignments().empty());
  EXPECT_EQ(w0.cancels(id), 0);
  EXPECT_EQ(workers().workers(0).state(), v1::BUSY);
  // Step 1's other half completes the step the old coordinator had half.
  step("w1", id, 1, 1, 0.1);
  step("w0", id, 0, 1, 0.1);  // a copy, sent again: stored once
  EXPECT_EQ(manager_->steps(id).size(), 4u);
  int step_events = 0;
  for (const auto& e : *manager_->events(id)) step_events += e.has_step();
  EXPECT_EQ(step_events, 2);
  result("w0", id, 0, 0);
  result("w1", id, 1, 0);
  EXPECT_EQ(job(id).state(), v1::SUCCEEDED);
  EXPECT_EQ(job(id).attempts(), 1);
  EXPECT_TRUE(incidents(id, "restart").empty());
}

TEST_F(AdoptionTest, ARankNotClaimedWithinTheAdoptTimeoutIsLost) {
  add_worker("w0");
  add_worker("w1");
  const std::string id = submit(ddp_spec(2));
  crash_and_restart();
  reclaim("w0", id, 0);
  clock_.advance(seconds(options_.adopt_timeout) - 0.5);
  manager_->tick();
  EXPECT_EQ(job(id).state(), v1::RUNNING);
  clock_.advance(1.0);
  manager_->tick();
  EXPECT_EQ(job(id).state(), v1::FAILED);
  EXPECT_EQ(job(id).error(),
            "rank 1 (worker w1) not claimed within --adopt-timeout 30 s of the coordinator's "
            "restart");
  EXPECT_EQ(links_["w0"]->cancels(id), 1);
}

TEST_F(AdoptionTest, ClaimsForAnUnknownJobAnotherAttemptOrAnotherWorkersRankStopThatRank) {
  add_worker("w0");
  add_worker("w1");
  const std::string id = submit(ddp_spec(2));
  crash_and_restart();
  FakeLink& stranger = reclaim("w9", "job-999999", 0);
  EXPECT_EQ(stranger.cancels("job-999999"), 1);
  FakeLink& old_attempt = reclaim("w8", id, 0, /*attempt=*/3);
  EXPECT_EQ(old_attempt.cancels(id), 1);
  FakeLink& impostor = reclaim("w7", id, 1);  // rank 1 is w1's
  EXPECT_EQ(impostor.cancels(id), 1);
  // Their cancelled results speak for no rank: the job goes on, and they are idle again.
  result("w7", id, 1, 0, v1::RANK_FAILURE_CANCELLED, "cancelled");
  EXPECT_EQ(job(id).state(), v1::RUNNING);
  reclaim("w0", id, 0);
  reclaim("w1", id, 1);
  EXPECT_EQ(incidents(id, "adopted").size(), 1u);
}

TEST_F(AdoptionTest, ADisconnectedWorkersRankIsNotLostWhileItsJobAdvances) {
  FakeLink& w0 = add_worker("w0");
  add_worker("w1");
  const std::string id = submit(ddp_spec(2));
  manager_->lost("w1", links_["w1"].get(), "its connection broke");
  EXPECT_EQ(workers().workers(1).state(), v1::DISCONNECTED);
  // Rank 0 keeps completing collectives, which it cannot without rank 1.
  for (int i = 1; i <= 12; ++i) {
    clock_.advance(5.0);
    v1::WorkerMessage beat;
    beat.set_job_id(id);
    beat.set_heartbeat(true);
    beat.mutable_progress()->set_last_completed(i);
    beat.mutable_progress()->set_step(i);
    manager_->on_message("w0", beat);
    manager_->tick();
  }
  EXPECT_EQ(job(id).state(), v1::RUNNING);
  EXPECT_EQ(w0.cancels(id), 0);
  reclaim("w1", id, 1, 0, 11, clock_.unix_seconds() - 60.0);
  EXPECT_EQ(workers().workers(1).state(), v1::BUSY);
  ASSERT_EQ(incidents(id, "adopted").size(), 1u);
  EXPECT_EQ(incidents(id, "adopted")[0].message(),
            "adopted: worker w1 claimed rank 1 again 60.0 s after its session ended; the rank "
            "trained on (last step 11)");
}

TEST_F(AdoptionTest, AJobWhoseOtherRanksFinishedWaitsTheAdoptTimeoutForTheCutOne) {
  add_worker("w0");
  add_worker("w1");
  const std::string id = submit(ddp_spec(2));
  manager_->lost("w1", links_["w1"].get(), "its connection broke");
  result("w0", id, 0, 0);  // rank 0 finished: the job advances no more, and that says nothing
  clock_.advance(seconds(options_.worker_timeout) + 1.0);
  manager_->tick();
  EXPECT_EQ(job(id).state(), v1::RUNNING);
  reclaim("w1", id, 1, 0, 19);
  result("w1", id, 1, 0);
  EXPECT_EQ(job(id).state(), v1::SUCCEEDED);
}

TEST_F(AdoptionTest, StoredMessagesAreAcknowledgedOnceCommittedAndCopiesStoredOnce) {
  FakeLink& w0 = add_worker("w0");
  add_worker("w1");
  const std::string id = submit(ddp_spec(2));
  sequenced_step("w0", id, 0, 0, 1);
  sequenced_step("w0", id, 0, 1, 2);
  EXPECT_TRUE(acknowledgements(w0).empty());  // in the store's batch, not yet committed
  store_->flush_steps();
  manager_->tick();
  EXPECT_EQ(acknowledgements(w0), std::vector<uint64_t>{2});
  // The session broke before the acknowledgement arrived: the daemon sends both again.
  manager_->lost("w0", &w0, "its connection broke");
  FakeLink& again = reclaim("w0", id, 0, 0, 1);
  sequenced_step("w0", id, 0, 0, 1);
  sequenced_step("w0", id, 0, 1, 2);
  sequenced_step("w0", id, 0, 2, 3);
  store_->flush_steps();
  manager_->tick();
  EXPECT_EQ(acknowledgements(again), std::vector<uint64_t>{3});
  EXPECT_EQ(manager_->steps(id).size(), 3u);
}

TEST_F(AdoptionTest, ACoordinatorsOwnPauseIsNoWorkersSilence) {
  options_.own_pause = std::chrono::seconds(2);
  open();
  FakeLink& w0 = add_worker("w0");
  manager_->tick();
  clock_.advance(30.0);  // SIGSTOP, SIGCONT: nothing ran, no heartbeat was read
  manager_->tick();
  EXPECT_FALSE(w0.disconnected);
  for (int i = 0; i < 32; ++i) {  // ticking again, and the worker really silent for 16 s
    clock_.advance(0.5);
    manager_->tick();
  }
  EXPECT_TRUE(w0.disconnected);
}

TEST_F(AdoptionTest, ASubmissionRetriedWithItsRequestIdCreatesOneJob) {
  v1::SubmitJobRequest request;
  *request.mutable_spec() = ddp_spec(1);
  request.set_request_id("4f1c");
  v1::Job first, retried;
  ASSERT_FALSE(manager_->submit(request, ddp_options_of(request.spec()), &first).has_value());
  crash_and_restart();  // the reply was lost with the coordinator
  ASSERT_FALSE(manager_->submit(request, ddp_options_of(request.spec()), &retried).has_value());
  EXPECT_EQ(retried.job_id(), first.job_id());
  EXPECT_EQ(manager_->job_order().size(), 1u);
}

}  // namespace
}  // namespace ddpd::coordinator
