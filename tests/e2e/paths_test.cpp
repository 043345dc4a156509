// A job's paths mean one thing everywhere (issue 61): ddpctl makes them absolute against the
// directory it runs in (a job file's, against the file's directory) before it submits, a worker
// that cannot open one fails the job naming itself, and a token file's sidecar (written by
// scripts/tokenize_text.py) is checked against the flags when the job starts. Driven through
// ddpctl against real daemons, from a directory that is not the daemons'.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <vector>

#include "ddpd/v1/ddpd.grpc.pb.h"
#include "e2e/cluster.h"

namespace ddpd::testing {
namespace {

// ddpctl run in `dir`, as a user who cd'd there types it.
ProcessOutcome ctl_in(Cluster& cluster, const std::string& dir, std::vector<std::string> args) {
  std::vector<std::string> argv{
      "/bin/sh",        "-c", "cd \"$0\" && exec \"$@\"", dir, bin("ddpctl"), "--coordinator",
      cluster.address()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, {{"DDPD_TOKEN", kToken}}, std::chrono::seconds(120));
}

// `count` tokens of `T`, each below 200 (every preset's vocabulary holds them).
template <typename T>
void write_tokens(const std::string& path, int count) {
  std::vector<T> tokens(count);
  for (int i = 0; i < count; ++i) tokens[i] = static_cast<T>((i * 7) % 200);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(tokens.data()),
             static_cast<std::streamsize>(tokens.size() * sizeof(T)));
}

// A job of 2 steps (unless `flags` name --steps) of the tiny model, on one worker.
std::vector<std::string> small_job(std::vector<std::string> flags) {
  std::vector<std::string> args{"submit",  "ddp", "--world-size", "1",  "--model",   "tiny",
                                "--batch", "2",   "--context",    "16", "--threads", "1"};
  if (std::find(flags.begin(), flags.end(), "--steps") == flags.end()) {
    args.insert(args.end(), {"--steps", "2"});
  }
  args.insert(args.end(), flags.begin(), flags.end());
  return args;
}

std::string fresh_dir(const std::string& name) {
  const std::string dir = temp_dir() + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// A relative --data typed in the user's directory, and a job file's relative paths, reach the
// workers (which run in another directory) as absolute paths, and the stored spec shows them.
TEST(Paths, RelativePathsAreTheUsersAndTheJobFilesAndTheSpecHoldsThemAbsolute) {
  const std::string user = fresh_dir("paths-user");
  std::filesystem::create_directories(user + "/data");
  std::filesystem::create_directories(user + "/jobs");
  write_tokens<uint16_t>(user + "/data/mine.u16", 4096);
  std::ofstream(user + "/jobs/job.yaml") << "data: ../data/mine.u16\n"
                                            "checkpoint-dir: ck\n"
                                            "checkpoint-every: 2\n";
  Cluster cluster(1, "paths");

  const auto flag = ctl_in(cluster, user, small_job({"--data", "data/mine.u16", "--watch"}));
  EXPECT_EQ(flag.exit_code, 0) << flag.out << flag.err;
  const std::string flag_job = job_id_of(flag.out);
  const auto flag_spec = cluster.ctl({"show", flag_job, "--spec"});
  EXPECT_NE(flag_spec.out.find("data: \"" + user + "/data/mine.u16\""), std::string::npos)
      << flag_spec.out;
  EXPECT_EQ(cluster.show(flag_job)["state"], "SUCCEEDED");

  // -f names the file relative to the user's directory; the file's paths are the file's.
  const auto file = ctl_in(cluster, user, small_job({"-f", "jobs/job.yaml", "--watch"}));
  EXPECT_EQ(file.exit_code, 0) << file.out << file.err;
  const std::string file_job = job_id_of(file.out);
  const auto file_spec = cluster.ctl({"show", file_job, "--spec"});
  EXPECT_NE(file_spec.out.find("data: \"" + user + "/data/mine.u16\""), std::string::npos)
      << file_spec.out;
  EXPECT_NE(file_spec.out.find("checkpoint-dir: \"" + user + "/jobs/ck\""), std::string::npos)
      << file_spec.out;
  EXPECT_TRUE(std::filesystem::exists(user + "/jobs/ck/latest"));

  // --resume's words stay words; its path is made absolute like the others.
  const auto resumed = ctl_in(cluster, user,
                              small_job({"--data", "data/mine.u16", "--checkpoint-dir", "jobs/ck",
                                         "--resume", "latest", "--steps", "3", "--watch"}));
  EXPECT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
  const auto resumed_spec = cluster.ctl({"show", job_id_of(resumed.out), "--spec"});
  EXPECT_NE(resumed_spec.out.find("resume: \"latest\""), std::string::npos) << resumed_spec.out;
  EXPECT_NE(resumed_spec.out.find("checkpoint-dir: \"" + user + "/jobs/ck\""), std::string::npos)
      << resumed_spec.out;
}

// ddpctl sees only the user's host: a path missing on a worker fails the job at start, naming
// the path, the worker, its host and what to do.
TEST(Paths, AWorkerThatCannotOpenAPathFailsTheJobNamingItselfAndItsHost) {
  Cluster cluster(1, "nopath");
  const std::string missing = temp_dir() + "/nopath-missing/tokens.u16";
  const auto submitted = cluster.ctl(small_job({"--data", missing}));
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  const auto job = cluster.wait_for_end(job_id_of(submitted.out));
  EXPECT_EQ(job["state"], "FAILED");
  const std::string text = job.dump();
  EXPECT_NE(text.find("--data: cannot open '" + missing + "'"), std::string::npos) << text;
  EXPECT_NE(text.find("on worker nopath-w0, host "), std::string::npos) << text;
  EXPECT_NE(text.find("must exist on every worker"), std::string::npos) << text;
}

// The coordinator reads --init-from's config.json where it runs, and says so.
TEST(Paths, TheCoordinatorSaysItCheckedAPathOnItsOwnHost) {
  Cluster cluster(0, "coordpath");
  auto stub = v1::Coordinator::NewStub(
      grpc::CreateChannel(cluster.address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.AddMetadata("authorization", "Bearer " + kToken);
  v1::SubmitJobRequest request;
  request.mutable_spec()->set_world_size(1);
  request.mutable_spec()->mutable_ddp()->set_init_from("/nonexistent-helperE/model");
  v1::Job reply;
  const grpc::Status status = stub->SubmitJob(&context, request, &reply);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("init_from: /nonexistent-helperE/model/config.json: "
                                        "cannot be read"),
            std::string::npos)
      << status.error_message();
  EXPECT_NE(status.error_message().find("checked on the coordinator's host"), std::string::npos)
      << status.error_message();
}

// tokenize_text.py writes PATH.json beside a token file: a job whose --data-dtype or vocabulary
// contradicts it fails at start naming the flag to change; one that agrees trains.
TEST(TokenSidecar, AFileDescribedOtherwiseThanTheFlagsFailsNamingTheFlag) {
  const std::string user = fresh_dir("sidecar-user");
  write_tokens<int32_t>(user + "/big.i32", 4096);
  std::ofstream(user + "/big.i32.json") << R"({"dtype": "int32", "vocab_size": 200})";
  write_tokens<uint16_t>(user + "/wide.u16", 4096);
  std::ofstream(user + "/wide.u16.json") << R"({"dtype": "uint16", "vocab_size": 70000})";
  Cluster cluster(1, "sidecar");
  auto ended = [&](std::vector<std::string> flags) {
    const auto submitted = ctl_in(cluster, user, small_job(flags));
    EXPECT_EQ(submitted.exit_code, 0) << submitted.err;
    return cluster.wait_for_end(job_id_of(submitted.out));
  };

  const auto as_uint16 = ended({"--data", "big.i32"});
  EXPECT_EQ(as_uint16["state"], "FAILED");
  EXPECT_NE(as_uint16.dump().find("--data-dtype: '" + user + "/big.i32' holds int32 tokens (" +
                                  user + "/big.i32.json), not uint16: pass --data-dtype int32"),
            std::string::npos)
      << as_uint16.dump();

  const auto too_wide = ended({"--data", "wide.u16"});
  EXPECT_EQ(too_wide["state"], "FAILED");
  EXPECT_NE(too_wide.dump().find("--vocab: '" + user +
                                 "/wide.u16' was tokenized with a vocabulary of 70000"),
            std::string::npos)
      << too_wide.dump();

  const auto agrees = ended({"--data", "big.i32", "--data-dtype", "int32"});
  EXPECT_EQ(agrees["state"], "SUCCEEDED") << agrees.dump();
}

}  // namespace
}  // namespace ddpd::testing
