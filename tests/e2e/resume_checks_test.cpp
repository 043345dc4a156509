// Resume says what it resumes (issue 61, item 1), through real daemons and ddpctl: `ddpctl resume
// JOB` takes the checkpoint JOB wrote, not a later job's; the history and the result name its
// step; a resume that would train no step, or contradicts the checkpoint, is refused at submit
// naming the flag and the value to use, and a rank that gets one anyway fails at once.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "ddpd/v1/ddpd.grpc.pb.h"
#include "e2e/cluster.h"

namespace ddpd::testing {
namespace {

std::vector<std::string> resume_job(std::vector<std::string> flags) {
  std::vector<std::string> args{"submit",    "ddp", "--batch",   "2",
                                "--context", "16",  "--threads", "1"};
  args.insert(args.end(), flags.begin(), flags.end());
  return args;
}

TEST(ResumeChecks, ResumeTakesTheJobsOwnCheckpointAndNamesIt) {
  Cluster cluster(1, "resume-own");
  const std::string dir = temp_dir() + "/resume-own-ckpt";
  std::filesystem::remove_all(dir);
  const auto first =
      cluster.ctl(resume_job({"--steps", "4", "--checkpoint-dir", dir, "--checkpoint-every", "2"}));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const std::string first_job = job_id_of(first.out);
  ASSERT_EQ(cluster.wait_for_end(first_job)["state"], "SUCCEEDED");
  // A later job writes step 6 into the same directory: `latest` now points at it.
  const auto later =
      cluster.ctl(resume_job({"--steps", "6", "--checkpoint-dir", dir, "--checkpoint-every", "6"}));
  ASSERT_EQ(later.exit_code, 0) << later.err;
  ASSERT_EQ(cluster.wait_for_end(job_id_of(later.out))["state"], "SUCCEEDED");
  ASSERT_TRUE(std::filesystem::exists(dir + "/step-000006/metadata.json"));

  const auto resumed = cluster.ctl({"resume", first_job, "--steps", "5"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  const auto shown = cluster.wait_for_end(job_id_of(resumed.out));
  ASSERT_EQ(shown["state"], "SUCCEEDED") << shown.dump();
  EXPECT_EQ(shown["history"][0]["reason"], "submitted: resumes " + first_job +
                                               "'s checkpoint of step 4 (" + dir + "/step-000004)");
  std::set<int> steps;
  for (const auto& s : shown["rank_steps"]) steps.insert(s["step"].get<int>());
  EXPECT_EQ(steps, (std::set<int>{4})) << "step 5 only, from the first job's step 4";
  EXPECT_EQ(shown["resumed_from"]["step"], 4) << shown.dump();
  EXPECT_EQ(shown["resumed_from"]["checkpoint"], dir + "/step-000004");
  const auto text = cluster.ctl({"show", job_id_of(resumed.out)}).out;
  EXPECT_NE(text.find("resumed from step 4 (" + dir + "/step-000004)"), std::string::npos) << text;
}

TEST(ResumeChecks, AResumeThatTrainsNoStepOrContradictsTheCheckpointIsRefused) {
  Cluster cluster(1, "resume-refused");
  const std::string dir = temp_dir() + "/resume-refused-ckpt";
  std::filesystem::remove_all(dir);
  const auto first =
      cluster.ctl(resume_job({"--steps", "4", "--checkpoint-dir", dir, "--checkpoint-every", "4"}));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const std::string first_job = job_id_of(first.out);
  ASSERT_EQ(cluster.wait_for_end(first_job)["state"], "SUCCEEDED");
  const std::string step4 = dir + "/step-000004";

  const auto at_end = cluster.ctl({"resume", first_job, "--steps", "3"});
  EXPECT_EQ(at_end.exit_code, 2);
  EXPECT_NE(at_end.err.find("--steps: the checkpoint " + step4 +
                            " has done 4 steps, and --steps 3 is the total: nothing would "
                            "train. Raise --steps above 4"),
            std::string::npos)
      << at_end.err;
  const auto latest = cluster.ctl(resume_job({"--resume", dir, "--steps", "4"}));
  EXPECT_EQ(latest.exit_code, 2);
  EXPECT_NE(latest.err.find("--steps 4 is the total"), std::string::npos) << latest.err;

  const auto batch = cluster.ctl(resume_job({"--resume", step4, "--steps", "8", "--batch", "4"}));
  EXPECT_EQ(batch.exit_code, 2);
  EXPECT_NE(batch.err.find("--batch: the checkpoint's data position 8 is not 4 global batches of "
                           "4: the checkpoint " +
                           step4 + " was written with --batch 2; resume with --batch 2"),
            std::string::npos)
      << batch.err;
  const auto model =
      cluster.ctl(resume_job({"--resume", step4, "--steps", "8", "--d-model", "32"}));
  EXPECT_EQ(model.exit_code, 2);
  EXPECT_NE(model.err.find("--d-model: 32 contradicts the checkpoint " + step4 +
                           ", written with --d-model 64; resume with --d-model 64"),
            std::string::npos)
      << model.err;

  // Past ddpctl (through the API), the rank refuses it at start, naming both numbers, where it
  // used to end SUCCEEDED with 0 steps.
  auto stub = v1::Coordinator::NewStub(
      grpc::CreateChannel(cluster.address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.AddMetadata("authorization", "Bearer " + kToken);
  v1::SubmitJobRequest request;
  request.mutable_spec()->set_world_size(1);
  auto* ddp = request.mutable_spec()->mutable_ddp();
  ddp->set_resume(step4);
  ddp->set_steps(4);
  ddp->set_batch_size(2);
  ddp->set_context_length(16);
  v1::Job reply;
  ASSERT_TRUE(stub->SubmitJob(&context, request, &reply).ok());
  EXPECT_EQ(reply.history(0).reason(), "submitted: resumes checkpoint of step 4 (" + step4 + ")");
  const auto failed = cluster.wait_for_end(reply.job_id());
  EXPECT_EQ(failed["state"], "FAILED");
  EXPECT_NE(
      failed["error"].get<std::string>().find("--steps: the checkpoint " + step4 +
                                              " has done 4 steps, and --steps 4 is the total"),
      std::string::npos)
      << failed.dump();
}

}  // namespace
}  // namespace ddpd::testing
