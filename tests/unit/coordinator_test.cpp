// The coordinator's pure parts and its SQLite store.
#include <gtest/gtest.h>
#include <unistd.h>

#include "ddpd/api/spec_convert.h"
#include "ddpd/common/stall_analysis.h"
#include "job_store.h"
#include "scheduling.h"

namespace ddpd::coordinator {
namespace {

TEST(StateMachine, OnlyTheSpecifiedTransitions) {
  EXPECT_TRUE(transition_allowed(v1::PENDING, v1::RUNNING));
  EXPECT_TRUE(transition_allowed(v1::PENDING, v1::CANCELLED));
  EXPECT_TRUE(transition_allowed(v1::PENDING, v1::FAILED));
  EXPECT_TRUE(transition_allowed(v1::RUNNING, v1::SUCCEEDED));
  EXPECT_TRUE(transition_allowed(v1::RUNNING, v1::FAILED));
  EXPECT_TRUE(transition_allowed(v1::RUNNING, v1::CANCELLED));
  EXPECT_FALSE(transition_allowed(v1::PENDING, v1::SUCCEEDED));
  EXPECT_TRUE(transition_allowed(v1::RUNNING, v1::PENDING));  // an automatic restart
  for (auto terminal : {v1::SUCCEEDED, v1::FAILED, v1::CANCELLED}) {
    for (auto to : {v1::PENDING, v1::RUNNING, v1::SUCCEEDED, v1::FAILED, v1::CANCELLED}) {
      EXPECT_FALSE(transition_allowed(terminal, to));
    }
  }
}

std::vector<IdleWorker> gloo_workers(std::initializer_list<const char*> ids) {
  std::vector<IdleWorker> out;
  for (const char* id : ids) out.push_back({id, {Backend::kGloo}});
  return out;
}

TEST(Scheduler, OldestJobFirstAndNoOvertaking) {
  const std::vector<PendingJob> pending{{"a", 3}, {"b", 1}};
  const auto four = gloo_workers({"w1", "w2", "w3", "w4"});
  // b fits, but a is first and fits once the busy w3 and w4 are idle again.
  EXPECT_FALSE(place_next(pending, gloo_workers({"w1", "w2"}), four));
  const auto placed = place_next(pending, four, four);
  ASSERT_TRUE(placed);
  EXPECT_EQ(placed->job_id, "a");
  EXPECT_EQ(placed->worker_ids, (std::vector<std::string>{"w1", "w2", "w3"}));
  EXPECT_FALSE(place_next({}, gloo_workers({"w1"}), four));
}

// Backfill: a job that can never start on the registered workers (more ranks than registered
// workers offering its backend) blocks no one; a job that fits once running jobs end still does.
TEST(Scheduler, AJobThatNeverFitsTheRegisteredWorkersDoesNotBlockTheQueue) {
  const auto two = gloo_workers({"w1", "w2"});
  const std::vector<PendingJob> pending{{"big", 3}, {"small", 2}, {"one", 1}};
  const auto placed = place_next(pending, two, two);
  ASSERT_TRUE(placed);
  EXPECT_EQ(placed->job_id, "small");
  EXPECT_EQ(placed->worker_ids, (std::vector<std::string>{"w1", "w2"}));
  // w2 busy: "small" fits the registered workers, so it blocks "one" (FIFO among those).
  EXPECT_FALSE(place_next(pending, gloo_workers({"w1"}), two));
  EXPECT_EQ(pending_reason(pending, 0, two, gloo_workers({"w1"})),
            "waiting for 3 idle workers offering gloo: 2 registered, 1 idle; never fits the 2 "
            "registered workers offering gloo: later jobs that fit start first");
  EXPECT_EQ(pending_reason(pending, 1, two, gloo_workers({"w1"})),
            "waiting for 2 idle workers offering gloo: 2 registered, 1 idle");
  EXPECT_EQ(pending_reason(pending, 2, two, gloo_workers({"w1"})), "queued behind small");
  // A third worker registers: "big" fits and blocks again.
  const auto three = gloo_workers({"w1", "w2", "w3"});
  EXPECT_FALSE(place_next(pending, gloo_workers({"w1", "w3"}), three));
  EXPECT_EQ(pending_reason(pending, 1, three, gloo_workers({"w1", "w3"})), "queued behind big");
  // A backend no registered worker offers never fits either; a fallback size that fits does.
  const std::vector<PendingJob> nccl{{"gpu", 1, Backend::kNccl}, {"cpu", 1}};
  ASSERT_TRUE(place_next(nccl, two, two));
  EXPECT_EQ(place_next(nccl, two, two)->job_id, "cpu");
  const std::vector<PendingJob> shrinks{{"restart", 3, Backend::kGloo, {2}}, {"one", 1}};
  EXPECT_FALSE(place_next(shrinks, gloo_workers({"w1"}), two));
  EXPECT_TRUE(fits_registered(shrinks[0], two));
  EXPECT_FALSE(fits_registered(pending[0], two));
}

// A restarting job may shrink to the largest fallback size the idle workers allow.
TEST(Scheduler, ARestartShrinksToTheLargestFallbackSizeThatFits) {
  const std::vector<PendingJob> pending{{"a", 4, Backend::kGloo, {3, 2, 1}}};
  const auto four = gloo_workers({"w1", "w2", "w3", "w4"});
  const auto three = place_next(pending, gloo_workers({"w1", "w2", "w3"}), four);
  ASSERT_TRUE(three);
  EXPECT_EQ(three->worker_ids, (std::vector<std::string>{"w1", "w2", "w3"}));
  const auto one = place_next(pending, gloo_workers({"w1"}), four);
  ASSERT_TRUE(one);
  EXPECT_EQ(one->worker_ids.size(), 1u);
  EXPECT_FALSE(place_next({{"b", 4, Backend::kGloo, {2}}}, gloo_workers({"w1"}), four));
}

// NCCL jobs (comm on nccl, DDP on cuda) go only to workers that offer nccl; a worker that
// names no backend is a Gloo worker, and a backend name the coordinator does not know is not
// offered.
TEST(Scheduler, JobsGoToWorkersOfferingTheirBackend) {
  const std::vector<IdleWorker> idle{{"cpu1", offered_backends({"gloo"})},
                                     {"gpu1", offered_backends({"gloo", "nccl"})},
                                     {"old", offered_backends({})},
                                     {"gpu2", offered_backends({"gloo", "nccl", "future"})}};
  EXPECT_EQ(idle[3].backends, (std::vector<Backend>{Backend::kGloo, Backend::kNccl}));
  const auto nccl = place_next({{"a", 2, Backend::kNccl}}, idle, idle);
  ASSERT_TRUE(nccl);
  EXPECT_EQ(nccl->worker_ids, (std::vector<std::string>{"gpu1", "gpu2"}));
  EXPECT_FALSE(place_next({{"a", 3, Backend::kNccl}}, idle, idle));
  const auto gloo = place_next({{"b", 3, Backend::kGloo}}, idle, idle);
  ASSERT_TRUE(gloo);
  EXPECT_EQ(gloo->worker_ids, (std::vector<std::string>{"cpu1", "gpu1", "old"}));

  v1::JobSpec spec;
  spec.mutable_ddp()->set_device("cuda");
  EXPECT_EQ(required_backend(spec, ddp_options_of(spec)), Backend::kNccl);
  spec.mutable_ddp()->set_device("cpu");
  EXPECT_EQ(required_backend(spec, ddp_options_of(spec)), Backend::kGloo);
  spec.mutable_comm()->set_backend("nccl");
  EXPECT_EQ(required_backend(spec, ddp_options_of(spec)), Backend::kNccl);
}

TEST(Scheduler, AggregatesTheSlowestRankAndTheMeanLoss) {
  v1::StepReport a, b;
  a.set_step(3);
  a.set_loss(2.0);
  a.set_step_seconds(0.5);
  a.set_comm_fraction(0.1);
  a.set_param_spread(1e-7);
  b.set_step(3);
  b.set_loss(4.0);
  b.set_step_seconds(0.7);
  b.set_comm_fraction(0.3);
  const auto s = aggregate_step({a, b});
  EXPECT_EQ(s.step(), 3);
  EXPECT_DOUBLE_EQ(s.loss(), 3.0);
  EXPECT_DOUBLE_EQ(s.step_seconds(), 0.7);
  EXPECT_DOUBLE_EQ(s.comm_fraction(), 0.3);
  EXPECT_DOUBLE_EQ(s.param_spread(), 1e-7);
}

// Submission's memory admission: a CPU job against the workers' host memory, a CUDA job against
// the memory of the GPU their ranks use, whichever worker has the most.
TEST(Scheduler, AdmissionComparesACudaJobWithGpuMemoryAndACpuJobWithHostMemory) {
  std::vector<v1::WorkerHello> workers(2);
  workers[0].set_memory_bytes(int64_t{64} << 30);
  workers[1].set_memory_bytes(int64_t{32} << 30);
  workers[1].set_gpu_memory_bytes(int64_t{80} << 30);
  AdmissionBudget budget = admission_budget(Device::kCpu, workers);
  EXPECT_EQ(budget.bytes, int64_t{64} << 30);
  EXPECT_EQ(budget.where, "the largest registered worker's memory");
  budget = admission_budget(Device::kCuda, workers);
  EXPECT_EQ(budget.bytes, int64_t{80} << 30);
  EXPECT_EQ(budget.where, "the largest registered worker's GPU memory");
  // No worker with a GPU advertises its memory: nothing to check yet (placement waits for one).
  workers.pop_back();
  EXPECT_EQ(admission_budget(Device::kCuda, workers).bytes, 0);
}

TEST(JobStore, SurvivesReopening) {
  const std::string path = "/tmp/ddpd-store-test-" + std::to_string(getpid()) + ".db";
  v1::Job job;
  job.set_job_id("job-000007");
  job.mutable_spec()->set_world_size(2);
  job.mutable_spec()->mutable_ddp()->set_model("tiny");
  job.set_state(v1::SUCCEEDED);
  job.add_worker_ids("w0");
  job.add_worker_ids("w1");
  job.set_result_json("{\"state\":\"SUCCEEDED\"}");
  v1::StepReport step;
  step.set_rank(1);
  step.set_step(4);
  step.set_loss(9.5);
  {
    JobStore store(path);
    store.save_job(job, 7);
    for (auto state : {v1::PENDING, v1::RUNNING, v1::SUCCEEDED}) {
      v1::StateTransition t;
      t.set_state(state);
      t.set_unix_time(100 + state);
      t.set_reason("because");
      store.add_transition(job.job_id(), t);
    }
    store.add_step(job.job_id(), step);
  }
  JobStore reopened(path);
  std::vector<int64_t> sequences;
  const auto jobs = reopened.load_jobs(sequences);
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].job_id(), "job-000007");
  EXPECT_EQ(jobs[0].state(), v1::SUCCEEDED);
  EXPECT_EQ(jobs[0].spec().ddp().model(), "tiny");
  EXPECT_EQ(jobs[0].worker_ids_size(), 2);
  EXPECT_EQ(jobs[0].worker_ids(1), "w1");
  EXPECT_EQ(jobs[0].result_json(), job.result_json());
  ASSERT_EQ(jobs[0].history_size(), 3);
  EXPECT_EQ(jobs[0].history(1).state(), v1::RUNNING);
  EXPECT_EQ(reopened.max_sequence(), 7);
  const auto steps = reopened.load_steps(job.job_id());
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].rank(), 1);
  EXPECT_DOUBLE_EQ(steps[0].loss(), 9.5);
  unlink(path.c_str());
}

// ddpctl's own check names the flag; the coordinator's names the field an API caller set.
std::string refusal(const v1::JobSpec& spec, FieldNames names) {
  try {
    validate_spec(spec, names);
  } catch (const OptionError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(SpecValidation, ApiErrorsNameTheProtoFieldAndDdpctlsNameTheFlag) {
  v1::JobSpec spec;
  spec.set_world_size(2);
  spec.mutable_ddp()->set_batch_size(7);
  EXPECT_EQ(refusal(spec, FieldNames::kFlag),
            "--batch: global batch 7 is not divisible by world size 2");
  EXPECT_EQ(refusal(spec, FieldNames::kProto),
            "batch_size: global batch 7 is not divisible by world size 2");
  spec.mutable_ddp()->set_batch_size(8);
  EXPECT_EQ(refusal(spec, FieldNames::kProto), "accepted");
  spec.set_world_size(0);
  EXPECT_EQ(refusal(spec, FieldNames::kProto).rfind("world_size: ", 0), 0u);
  EXPECT_EQ(refusal(v1::JobSpec(), FieldNames::kProto).rfind("world_size: ", 0), 0u);
  v1::JobSpec no_kind;
  no_kind.set_world_size(1);
  EXPECT_EQ(refusal(no_kind, FieldNames::kProto).rfind("kind: ", 0), 0u);
  // The API accepted 100000 intra-op threads per rank.
  spec.set_world_size(2);
  spec.mutable_ddp()->set_threads(100000);
  EXPECT_EQ(refusal(spec, FieldNames::kProto).rfind("threads: must be in 0..256", 0), 0u)
      << refusal(spec, FieldNames::kProto);
}

TEST(SpecValidation, EveryFlagMapsToAFieldOfItsSpec) {
  const auto* job = v1::JobSpec::descriptor();
  const auto* ddp = v1::DdpSpec::descriptor();
  const auto* comm = v1::CommSpec::descriptor();
  for (const char* flag : {"--model",           "--d-model",      "--d-ff",
                           "--layers",          "--heads",        "--vocab",
                           "--context",         "--batch",        "--steps",
                           "--warmup-steps",    "--strategy",     "--bucket-mb",
                           "--shard-optimizer", "--lr",           "--beta1",
                           "--beta2",           "--eps",          "--weight-decay",
                           "--precision",       "--attention",    "--device",
                           "--data-dtype",      "--spread-every", "--max-param-spread",
                           "--threads",         "--timeout"}) {
    EXPECT_NE(ddp->FindFieldByName(proto_field(flag)), nullptr) << flag;
  }
  for (const char* flag :
       {"--collective", "--sizes", "--backend", "--dtype", "--warmup", "--iters", "--timeout"}) {
    EXPECT_NE(comm->FindFieldByName(proto_field(flag)), nullptr) << flag;
  }
  EXPECT_NE(job->FindFieldByName(proto_field("--world-size")), nullptr);
  EXPECT_NE(job->FindFieldByName(proto_field("WORLD_SIZE")), nullptr);
}

}  // namespace
// The stall analysis on hand-made heartbeats: the waiting ranks and the collective, the ranks
// that have not joined it and where they are, a desync, and a stall outside collectives.
RankPosition progress(const std::string& phase, int64_t step, int64_t enqueued, int64_t completed) {
  return RankPosition{phase, step, enqueued, completed, std::nullopt};
}

RankPosition waiting_in(int64_t seq, const std::string& op, int64_t numel, double age) {
  auto p = progress("sync", 17, seq, seq - 1);
  p.oldest_pending = CollectiveRecord{seq, op, "bucket3", numel, "float32", age};
  return p;
}

TEST(StallAnalysis, NamesTheWaitingRanksTheCollectiveAndTheRankThatHasNotJoined) {
  const std::vector<RankReport> ranks{{0, waiting_in(1043, "all_reduce", 1100000, 61)},
                                      {1, progress("backward", 17, 1041, 1041)},
                                      {2, waiting_in(1043, "all_reduce", 1100000, 60)}};
  const auto finding = analyze_stall(ranks, 61);
  EXPECT_EQ(finding.kind, IncidentKind::kStall);
  EXPECT_EQ(finding.rank, 1);
  EXPECT_EQ(finding.message,
            "stall: ranks 0,2 wait in all_reduce #1043 (bucket3, 4.2 MB) for 61 s; rank 1 has "
            "not joined it: in backward of step 17, last completed #1041");
}

TEST(StallAnalysis, DifferentCollectivesUnderOneSequenceNumberAreADesync) {
  const std::vector<RankReport> ranks{{0, waiting_in(57, "all_reduce", 4096, 9)},
                                      {1, waiting_in(57, "all_gather", 4096, 9)}};
  const auto finding = analyze_stall(ranks, 9);
  EXPECT_EQ(finding.kind, IncidentKind::kDesync);
  EXPECT_EQ(finding.rank, 1);
  EXPECT_EQ(finding.message,
            "desync: rank 1 launched all_gather(4096 × float32) [bucket3] as #57 where rank 0 "
            "launched all_reduce(4096 × float32) [bucket3]");
}

TEST(StallAnalysis, NoRankInACollectiveSaysWhereEachIs) {
  const std::vector<RankReport> ranks{{0, progress("forward", 3, 20, 20)}, {1, std::nullopt}};
  const auto finding = analyze_stall(ranks, 12);
  EXPECT_EQ(finding.rank, -1);
  EXPECT_EQ(finding.message,
            "stall: no rank completed a collective or a step for 12 s and none waits in a "
            "collective: rank 0 in forward of step 3, last completed #20; rank 1 no progress "
            "reported yet");
}

TEST(Scheduler, PendingJobsSayWhyTheyWait) {
  const std::vector<PendingJob> pending{{"job-000001", 5, Backend::kGloo},
                                        {"job-000002", 1, Backend::kGloo}};
  const std::vector<IdleWorker> idle{{"w0", {Backend::kGloo}}, {"w1", {Backend::kNccl}}};
  const auto registered = gloo_workers({"w0", "w2", "w3", "w4", "w5"});
  EXPECT_EQ(pending_reason(pending, 0, registered, idle),
            "waiting for 5 idle workers offering gloo: 5 registered, 1 idle");
  EXPECT_EQ(pending_reason(pending, 1, registered, idle), "queued behind job-000001");
}

}  // namespace ddpd::coordinator
