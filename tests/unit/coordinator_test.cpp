// The coordinator's pure parts and its SQLite store.
#include <gtest/gtest.h>
#include <unistd.h>

#include "ddpd/api/spec_convert.h"
#include "ddpd/common/stall_analysis.h"
#include "job_store.h"
#include "scheduling.h"
#include "straggler_watch.h"

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
  EXPECT_FALSE(place_next(pending, gloo_workers({"w1", "w2"})));  // b fits, but a is first
  const auto placed = place_next(pending, gloo_workers({"w1", "w2", "w3", "w4"}));
  ASSERT_TRUE(placed);
  EXPECT_EQ(placed->job_id, "a");
  EXPECT_EQ(placed->worker_ids, (std::vector<std::string>{"w1", "w2", "w3"}));
  EXPECT_FALSE(place_next({}, gloo_workers({"w1"})));
}

// A restarting job may shrink to the largest fallback size the idle workers allow.
TEST(Scheduler, ARestartShrinksToTheLargestFallbackSizeThatFits) {
  const std::vector<PendingJob> pending{{"a", 4, Backend::kGloo, {3, 2, 1}}};
  const auto three = place_next(pending, gloo_workers({"w1", "w2", "w3"}));
  ASSERT_TRUE(three);
  EXPECT_EQ(three->worker_ids, (std::vector<std::string>{"w1", "w2", "w3"}));
  const auto one = place_next(pending, gloo_workers({"w1"}));
  ASSERT_TRUE(one);
  EXPECT_EQ(one->worker_ids.size(), 1u);
  EXPECT_FALSE(place_next({{"b", 4, Backend::kGloo, {2}}}, gloo_workers({"w1"})));
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
  const auto nccl = place_next({{"a", 2, Backend::kNccl}}, idle);
  ASSERT_TRUE(nccl);
  EXPECT_EQ(nccl->worker_ids, (std::vector<std::string>{"gpu1", "gpu2"}));
  EXPECT_FALSE(place_next({{"a", 3, Backend::kNccl}}, idle));
  const auto gloo = place_next({{"b", 3, Backend::kGloo}}, idle);
  ASSERT_TRUE(gloo);
  EXPECT_EQ(gloo->worker_ids, (std::vector<std::string>{"cpu1", "gpu1", "old"}));

  v1::JobSpec spec;
  spec.mutable_ddp()->set_device("cuda");
  EXPECT_EQ(required_backend(spec), Backend::kNccl);
  spec.mutable_ddp()->set_device("cpu");
  EXPECT_EQ(required_backend(spec), Backend::kGloo);
  spec.mutable_comm()->set_backend("nccl");
  EXPECT_EQ(required_backend(spec), Backend::kNccl);
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
  const auto jobs = reopened.load_jobs();
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
  EXPECT_EQ(pending_reason(pending, 0, 3, idle),
            "waiting for 5 idle workers offering gloo: 3 registered, 1 idle");
  EXPECT_EQ(pending_reason(pending, 1, 3, idle), "queued behind job-000001");
}

// Straggler scores over a sliding window: one finding per episode, for the slow rank only, after
// kPersistence steps below the threshold.
TEST(StragglerWatch, NamesTheSlowRankOncePerEpisode) {
  StragglerWatch watch(3, 0.75, /*window=*/3);
  std::vector<StragglerFinding> findings;
  auto feed = [&](int64_t step, double slow) {
    for (auto& f : watch.add_step(step, {0.10, slow, 0.11})) findings.push_back(f);
  };
  for (int64_t step = 0; step < 3; ++step) feed(step, 0.10);
  EXPECT_TRUE(findings.empty());
  // Rank 1 at 0.21 from step 3, 1.9x the median rank (0.11): its median crosses at step 4
  // (window 2-4) and it is reported at step 6, after 3 steps below, once.
  for (int64_t step = 3; step < 6; ++step) feed(step, 0.21);
  EXPECT_TRUE(findings.empty()) << findings.front().message;
  for (int64_t step = 6; step < 12; ++step) feed(step, 0.21);
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].rank, 1);
  EXPECT_EQ(findings[0].message,
            "straggler: rank 1 (score 0.52: compute 1.9× the median rank's) at steps 4–6");
  EXPECT_NEAR(watch.scores()[1], 0.524, 0.001);
  EXPECT_DOUBLE_EQ(watch.scores()[0], 1.0);  // faster than the median: capped at 1
  EXPECT_DOUBLE_EQ(watch.scores()[2], 1.0);
  // Hovering just above the threshold (score 0.85 < 0.875) does not end the episode.
  for (int64_t step = 12; step < 15; ++step) feed(step, 0.13);
  for (int64_t step = 15; step < 18; ++step) feed(step, 0.21);
  EXPECT_EQ(findings.size(), 1u);
  for (int64_t step = 18; step < 21; ++step) feed(step, 0.10);  // recovers: episode over
  for (int64_t step = 21; step < 26; ++step) feed(step, 0.30);  // a second episode
  ASSERT_EQ(findings.size(), 2u);
  EXPECT_EQ(findings[1].rank, 1);
  StragglerWatch off(2, 0.0, 3);  // threshold 0: never
  for (int64_t step = 0; step < 6; ++step) EXPECT_TRUE(off.add_step(step, {0.1, 1.0}).empty());
}

// What an oversubscribed host does to healthy ranks: every rank slowed at once, and one rank or
// another descheduled for a step or two. Neither is a straggler.
TEST(StragglerWatch, StepsWhereEveryRankSlowedAndShortStallsNameNoOne) {
  StragglerWatch watch(3, 0.75);
  for (int64_t step = 0; step < 60; ++step) {
    std::vector<double> compute{0.10, 0.10, 0.10};
    if (step % 7 == 0) compute = {0.40, 0.42, 0.38};  // the whole host slowed
    compute[step % 3] *= step % 4 == 0 ? 3.0 : 1.0;   // one rank descheduled, each in turn
    if (step >= 20 && step < 23) compute[1] *= 4.0;   // three slow steps in a row for rank 1
    EXPECT_TRUE(watch.add_step(step, compute).empty()) << "step " << step;
  }
  for (double score : watch.scores()) EXPECT_GT(score, 0.75);
}

// At world 2 the reference is the faster rank; at world 4 the second fastest, so one slow rank
// cannot make a healthy one look slow.
TEST(StragglerWatch, TheReferenceIsTheLowerMedianRank) {
  StragglerWatch two(2, 0.75);
  StragglerWatch four(4, 0.75);
  std::vector<StragglerFinding> found_two, found_four;
  for (int64_t step = 0; step < 20; ++step) {
    for (auto& f : two.add_step(step, {0.10, 0.30})) found_two.push_back(f);
    for (auto& f : four.add_step(step, {0.10, 0.11, 0.12, 0.30})) found_four.push_back(f);
  }
  ASSERT_EQ(found_two.size(), 1u);
  EXPECT_EQ(found_two[0].rank, 1);
  // Each score is one division of the same doubles the test writes (medians of equal values):
  // within an ulp or two of the quotient, so 1e-12 is loose.
  EXPECT_NEAR(two.scores()[1], 1.0 / 3, 1e-12);
  ASSERT_EQ(found_four.size(), 1u);
  EXPECT_EQ(found_four[0].rank, 3);
  EXPECT_NEAR(four.scores()[3], 0.11 / 0.30, 1e-12);
  EXPECT_NEAR(four.scores()[2], 0.11 / 0.12, 1e-12);
  // Reported at step 11: the window is full at step 9, then 3 steps below the threshold.
  EXPECT_EQ(found_four[0].message.substr(found_four[0].message.find(" at steps")),
            " at steps 2–11");
}

}  // namespace ddpd::coordinator
