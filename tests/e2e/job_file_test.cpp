// Job files through ddpctl and a real coordinator: `submit -f` (YAML and JSON) takes every flag,
// flags override the file, bad keys and types are refused naming the key, `show --spec` prints a
// file that resubmits the job unchanged, and the demo's job file trains a falling loss.
#include <filesystem>
#include <fstream>

#include "e2e/cluster.h"

namespace ddpd::testing {
namespace {

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = temp_dir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(JobFile, SubmitTakesTheFileFlagsWinAndShowSpecResubmitsUnchanged) {
  Cluster cluster(0, "jobfile");  // no workers: the jobs stay PENDING with their specs
  const std::string yaml = write_file("job.yaml",
                                      "kind: ddp\n"
                                      "world-size: 3\n"
                                      "strategy: flat\n"
                                      "bucket_mb: 5\n"  // '_' for '-'
                                      "steps: 7\n"
                                      "batch: 12\n"
                                      "grad-accum: 2\n"
                                      "shard-optimizer: true\n"
                                      "lr: 0.003\n"
                                      "lr-schedule: cosine\n"
                                      "data-text: /usr/share/common-licenses/GPL-3\n");
  auto submitted = cluster.ctl({"submit", "ddp", "-f", yaml, "--steps", "9"});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  const std::string job = job_id_of(submitted.out);
  const auto spec = cluster.ctl({"show", job, "--spec"});
  ASSERT_EQ(spec.exit_code, 0) << spec.err;
  for (const char* line :
       {"kind: ddp", "world-size: 3", "strategy: \"flat\"", "bucket-mb: 5", "steps: 9", "batch: 12",
        "grad-accum: 2", "shard-optimizer: true", "lr: 0.003", "lr-schedule: \"cosine\"",
        "data-text: \"/usr/share/common-licenses/GPL-3\""}) {
    EXPECT_NE(("\n" + spec.out).find(std::string("\n") + line + "\n"), std::string::npos)
        << line << " in\n"
        << spec.out;
  }
  // The printed spec resubmits unchanged.
  const std::string again = write_file("again.yaml", spec.out);
  submitted = cluster.ctl({"submit", "ddp", "-f", again});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  EXPECT_EQ(cluster.ctl({"show", job_id_of(submitted.out), "--spec"}).out, spec.out);

  // JSON is YAML; a comm job's lists round-trip too.
  const std::string json =
      write_file("comm.json",
                 R"({"kind": "comm", "world-size": 2, "collective": ["all_reduce", "broadcast"],
          "sizes": ["1MB", "4KB"], "iters": 3})");
  submitted = cluster.ctl({"submit", "comm", "-f", json});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  const auto comm_spec = cluster.ctl({"show", job_id_of(submitted.out), "--spec"}).out;
  EXPECT_NE(comm_spec.find("collective: [all_reduce, broadcast]"), std::string::npos) << comm_spec;
  EXPECT_NE(comm_spec.find("sizes: [1MB, 4KB]"), std::string::npos) << comm_spec;
  submitted = cluster.ctl({"submit", "comm", "-f", write_file("comm-again.yaml", comm_spec)});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  EXPECT_EQ(cluster.ctl({"show", job_id_of(submitted.out), "--spec"}).out, comm_spec);
}

TEST(JobFile, UnknownKeysWrongTypesAndKindsAreRefusedNamingTheKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"stratgy: flat\n", "key 'stratgy': unknown key"},
      {"steps: abc\n", "key 'steps': --steps: 'abc' is not an integer"},
      {"steps: {every: 2}\n", "key 'steps': expected a value, got a mapping"},
      {"kind: comm\n", "key 'kind': the file describes a comm job, the command runs ddp"},
      {"- steps\n", "expected a mapping"},
      // yaml-cpp keeps both of two equal keys; which one was meant is a guess.
      {"steps: 2\nsteps: 3\n", "key 'steps': the key is given twice"},
      {"grad_accum: 2\ngrad-accum: 4\n", "key 'grad-accum': the key is given twice"},
  };
  // Not files: each refused in one line naming -f and the path (they used to abort ddpctl).
  for (const auto& [path, message] : std::vector<std::pair<std::string, std::string>>{
           {temp_dir(), "is a directory"},
           {"/proc/self/mem", "cannot read it"},
           {temp_dir() + "/absent.yaml", "cannot read it"}}) {
    const auto o =
        run_process({bin("ddpctl"), "local", "ddp", "-f", path}, {}, std::chrono::seconds(30));
    EXPECT_EQ(o.exit_code, 2) << path << ": " << o.err;
    EXPECT_NE(o.err.find("error: -f: " + path + ": " + message), std::string::npos) << o.err;
  }
  int i = 0;
  for (const auto& [text, message] : cases) {
    const std::string path = write_file("bad" + std::to_string(i++) + ".yaml", text);
    const auto o =
        run_process({bin("ddpctl"), "local", "ddp", "-f", path}, {}, std::chrono::seconds(30));
    EXPECT_EQ(o.exit_code, 2) << text;
    EXPECT_NE(o.err.find("error: -f: " + path), std::string::npos) << o.err;
    EXPECT_NE(o.err.find(message), std::string::npos) << text << " gave " << o.err;
  }
}

// The quick start's job file: on the GPL's text the loss falls well below ln 256.
TEST(JobFile, TheDemoJobTrainsAFallingLoss) {
  const std::string demo = std::string(DDPD_SOURCE_DIR) + "/docs/examples/demo.yaml";
  const auto o = run_process(
      {bin("ddpctl"), "local", "--workers", "2", "ddp", "-f", demo, "--steps", "40", "--json"}, {},
      std::chrono::seconds(180));
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const auto result = nlohmann::json::parse(o.out);
  const auto& steps = result["steps"];
  ASSERT_EQ(steps.size(), 40u);
  const double first = steps.front()["loss"], last = steps.back()["loss"];
  std::printf("demo: loss %.3f -> %.3f, held-out %.3f at step 20\n", first, last,
              steps[19]["eval_loss"].get<double>());
  EXPECT_GT(first, 5.0);
  EXPECT_LT(last, 3.5);
  EXPECT_LT(steps[39]["eval_loss"].get<double>(), steps[19]["eval_loss"].get<double>() + 0.05);
}

// `local ddp -f` runs a file that `show --spec` or `tune -o` wrote, world-size and all: the
// file's world size sets the ranks, and more workers start than --workers if it needs them.
TEST(JobFile, LocalRunsASpecFileAtItsWorldSize) {
  const std::string file = write_file("local.yaml",
                                      "kind: ddp\n"
                                      "world-size: 3\n"
                                      "model: tiny\n"
                                      "batch: 6\n"
                                      "context: 16\n"
                                      "steps: 2\n"
                                      "threads: 1\n");
  const auto local =
      run_process({bin("ddpctl"), "local", "--workers", "2", "--json", "ddp", "-f", file}, {},
                  std::chrono::seconds(120));
  ASSERT_EQ(local.exit_code, 0) << local.err;
  const auto out = nlohmann::json::parse(local.out);
  EXPECT_EQ(out["state"], "SUCCEEDED");
  EXPECT_EQ(out["world_size"], 3);
  EXPECT_EQ(out["workers"].size(), 3u);
}

}  // namespace
}  // namespace ddpd::testing
