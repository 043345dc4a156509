// `ddpd-worker run ddp --json` as a user runs it: single process and real multi-rank launches.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <signal.h>

#include <fstream>
#include <memory>
#include <thread>

#include "ddpd/common/job_options.h"
#include "support/process.h"

namespace ddpd::testing {
namespace {

const std::vector<std::string> kJob{DDPD_WORKER_BINARY,
                                    "run",
                                    "ddp",
                                    "--model",
                                    "tiny",
                                    "--batch",
                                    "4",
                                    "--context",
                                    "32",
                                    "--steps",
                                    "6",
                                    "--warmup-steps",
                                    "2",
                                    "--threads",
                                    "1",
                                    "--json"};

std::vector<std::string> job(std::vector<std::string> extra) {
  auto argv = kJob;
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

nlohmann::json result_of(const ProcessOutcome& o) {
  EXPECT_EQ(o.exit_code, 0) << o.err;
  return nlohmann::json::parse(o.out);
}

const nlohmann::json& single_process() {
  static const nlohmann::json result =
      result_of(run_process(job({}), {}, std::chrono::seconds(120)));
  return result;
}

TEST(WorkerRun, SingleProcessResultHasEveryField) {
  const auto& r = single_process();
  EXPECT_EQ(r["state"], "SUCCEEDED");
  ASSERT_EQ(r["steps"].size(), 6u);
  for (const auto& s : r["steps"]) {
    for (const char* key : {"step", "loss", "step_seconds", "forward_seconds", "backward_seconds",
                            "optimizer_seconds", "comm_seconds", "exposed_comm_seconds",
                            "comm_fraction", "param_spread"}) {
      EXPECT_TRUE(s.contains(key)) << key;
    }
    EXPECT_GT(s["step_seconds"].get<double>(), 0);
    EXPECT_LE(s["forward_seconds"].get<double>() + s["backward_seconds"].get<double>(),
              s["step_seconds"].get<double>());
  }
  // An untrained LM over 10000 tokens starts near ln(10000) = 9.21.
  EXPECT_NEAR(r["steps"][0]["loss"].get<double>(), 9.21, 0.5);
  const auto& summary = r["summary"];
  for (const char* key : {"final_loss", "median_step_seconds", "std_step_seconds",
                          "max_param_spread", "tokens_per_second", "median_comm_fraction"}) {
    EXPECT_TRUE(summary.contains(key)) << key;
  }
  const int64_t params = count_parameters(model_preset("tiny"));
  const auto& memory = r["memory"];
  EXPECT_EQ(memory["after_init"]["param_bytes"].get<int64_t>(), 4 * params);
  EXPECT_EQ(memory["after_init"]["optimizer_state_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(memory["before_step"]["grad_bytes"].get<int64_t>(), 4 * params);
  EXPECT_EQ(memory["after_step"]["optimizer_state_bytes"].get<int64_t>(), 2 * 4 * params);
  EXPECT_GT(memory["after_step"]["peak_bytes"].get<int64_t>(), 4 * params);
}

class WorkerRunMultiRank : public ::testing::TestWithParam<std::string> {};

TEST_P(WorkerRunMultiRank, TwoRanksMatchSingleProcessLoss) {
  const auto outcomes =
      run_ranks(job({"--strategy", GetParam(), "--bucket-mb", "1"}), 2, std::chrono::seconds(120));
  ASSERT_EQ(outcomes[1].exit_code, 0) << outcomes[1].err;
  EXPECT_TRUE(outcomes[1].out.empty()) << "only rank 0 prints the result";
  const auto r = result_of(outcomes[0]);
  EXPECT_EQ(r["state"], "SUCCEEDED");
  EXPECT_LT(r["summary"]["max_param_spread"].get<double>(), 1e-6);
  for (size_t i = 0; i < 6; ++i) {
    // The mean loss over ranks equals the single-process loss on the same global batch.
    EXPECT_NEAR(r["steps"][i]["loss"].get<double>(),
                single_process()["steps"][i]["loss"].get<double>(), 1e-4)
        << "step " << i;
    EXPECT_GT(r["steps"][i]["comm_seconds"].get<double>(), 0) << "no communication measured";
    EXPECT_LE(r["steps"][i]["exposed_comm_seconds"].get<double>(),
              r["steps"][i]["step_seconds"].get<double>());
  }
}

INSTANTIATE_TEST_SUITE_P(Strategies, WorkerRunMultiRank,
                         ::testing::Values("naive", "flat", "overlap", "bucketed", "fsdp"));

// Two ranks training with the tiled (flash) attention follow the single process with naive
// attention: same losses at every step.
TEST(WorkerRun, FlashAttentionTrainsLikeNaiveAttention) {
  const auto outcomes = run_ranks(job({"--attention", "flash"}), 2, std::chrono::seconds(120));
  ASSERT_EQ(outcomes[0].exit_code, 0) << outcomes[0].err;
  const auto r = result_of(outcomes[0]);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_NEAR(r["steps"][i]["loss"].get<double>(),
                single_process()["steps"][i]["loss"].get<double>(), 1e-4)
        << "step " << i;
  }
  const auto bad = run_process(job({"--attention", "sparse"}), {}, std::chrono::seconds(60));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--attention"), std::string::npos) << bad.err;
}

// --device picks the process group and where tensors live: cpu is Gloo, cuda is NCCL on the
// local rank's GPU. Unknown devices are refused naming the flag; a CPU build refuses cuda up
// front, naming the backend, for training and for the comm benchmark alike.
TEST(WorkerRun, DeviceFlagIsCheckedAgainstTheBuild) {
  const auto unknown = run_process(job({"--device", "tpu"}), {}, std::chrono::seconds(60));
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find("--device: must be cpu or cuda, got 'tpu'"), std::string::npos)
      << unknown.err;
  const auto snapshot = run_process(job({"--cuda-memory-snapshot", temp_dir() + "/snap.json"}), {},
                                    std::chrono::seconds(60));
  EXPECT_EQ(snapshot.exit_code, 2);
  EXPECT_NE(snapshot.err.find("error: --cuda-memory-snapshot: needs --device cuda"),
            std::string::npos)
      << snapshot.err;
  const auto cpu = result_of(run_process(job({"--device", "cpu"}), {}, std::chrono::seconds(60)));
  EXPECT_NEAR(cpu["summary"]["final_loss"].get<double>(),
              single_process()["summary"]["final_loss"].get<double>(), 1e-9);
  const auto cuda = run_process(job({"--device", "cuda"}), {}, std::chrono::seconds(60));
  EXPECT_EQ(cuda.exit_code, 2);
  EXPECT_NE(cuda.err.find("error: backend: nccl needs a CUDA build of ddpd"), std::string::npos)
      << cuda.err;
  const auto comm = run_process({DDPD_WORKER_BINARY, "run", "comm", "--backend", "nccl"}, {},
                                std::chrono::seconds(60));
  EXPECT_EQ(comm.exit_code, 2);
  EXPECT_NE(comm.err.find("error: backend: nccl needs a CUDA build of ddpd"), std::string::npos)
      << comm.err;
}

// ddpd-train (the core without the daemons, for GPU machines) trains exactly as
// `ddpd-worker run ddp` does, single process and over 2 ranks.
TEST(WorkerRun, CoreOnlyTrainerMatchesTheWorker) {
  std::vector<std::string> argv = job({});
  argv.erase(argv.begin(), argv.begin() + 3);  // binary, run, ddp
  argv.erase(argv.end() - 1);                  // --json: ddpd-train always prints JSON
  argv.insert(argv.begin(), DDPD_TRAIN_BINARY);
  const auto one = result_of(run_process(argv, {}, std::chrono::seconds(60)));
  const auto two = run_ranks(argv, 2, std::chrono::seconds(120));
  ASSERT_EQ(two[0].exit_code, 0) << two[0].err;
  const auto ranks = result_of(two[0]);
  for (size_t i = 0; i < 6; ++i) {
    const double reference = single_process()["steps"][i]["loss"].get<double>();
    EXPECT_NEAR(one["steps"][i]["loss"].get<double>(), reference, 1e-9) << "step " << i;
    EXPECT_NEAR(ranks["steps"][i]["loss"].get<double>(), reference, 1e-4) << "step " << i;
  }
}

TEST(WorkerRun, ShardingHalvesOptimizerStateAndFsdpHalvesParameters) {
  const int64_t bytes = 4 * count_parameters(model_preset("tiny"));
  const auto sharded = result_of(
      run_ranks(job({"--strategy", "flat", "--shard-optimizer"}), 2, std::chrono::seconds(120))[0]);
  const int64_t state = sharded["memory"]["after_step"]["optimizer_state_bytes"].get<int64_t>();
  // Rank 0 owns about half the parameters: within one embedding matrix (2.56 MB) of half.
  EXPECT_NEAR(static_cast<double>(state), bytes, 2 * 2560000.0);
  EXPECT_LT(state, 2 * bytes);

  const auto fsdp =
      result_of(run_ranks(job({"--strategy", "fsdp"}), 2, std::chrono::seconds(120))[0]);
  const auto& after = fsdp["memory"]["after_step"];
  // Between steps rank 0 holds one shard (half, plus padding) of parameters and optimizer state.
  EXPECT_NEAR(after["param_bytes"].get<double>(), bytes / 2.0, 64);
  EXPECT_NEAR(after["optimizer_state_bytes"].get<double>(), bytes, 128);
}

TEST(WorkerRun, BadFlagsGiveOneLineNamingTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  for (const auto& c : std::vector<Case>{
           {{"--model", "huge"}, "error: --model: unknown model 'huge'"},
           {{"--strategy", "ring"},
            "error: --strategy: must be naive, flat, overlap, bucketed or fsdp, got 'ring'"},
           {{"--bucket-mb", "0"}, "error: --bucket-mb: must be > 0"},
           {{"--steps", "-1"}, "error: --steps: must be >= 0"}}) {
    const auto o = run_process(job(c.args), {}, std::chrono::seconds(30));
    EXPECT_EQ(o.exit_code, 2) << c.message;
    EXPECT_EQ(o.err.rfind(c.message, 0), 0u) << o.err;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  }
  const auto o =
      run_process(job({"--batch", "5"}), {{"WORLD_SIZE", "2"}}, std::chrono::seconds(30));
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.err, "error: --batch: global batch 5 is not divisible by world size 2\n");
}

TEST(WorkerRun, FailureIsReportedAsJson) {
  const auto o =
      run_process(job({"--data", "/nonexistent/tokens.bin"}), {}, std::chrono::seconds(30));
  EXPECT_EQ(o.exit_code, 1);
  const auto r = nlohmann::json::parse(o.out);
  EXPECT_EQ(r["state"], "FAILED");
  EXPECT_NE(r["error"].get<std::string>().find("--data"), std::string::npos) << r.dump();
}

}  // namespace
}  // namespace ddpd::testing

namespace ddpd::testing {
namespace {

TEST(WorkerRun, Bf16AutocastTrainsCloseToFp32) {
  const auto bf16 =
      result_of(run_process(job({"--precision", "bf16"}), {}, std::chrono::seconds(120)));
  EXPECT_EQ(bf16["state"], "SUCCEEDED");
  for (size_t i = 0; i < 6; ++i) {
    const double ours = bf16["steps"][i]["loss"].get<double>();
    const double fp32 = single_process()["steps"][i]["loss"].get<double>();
    EXPECT_NEAR(ours, fp32, 0.05) << "step " << i;
    EXPECT_NE(ours, fp32) << "bf16 autocast had no effect at step " << i;
  }
}

void write_tokens(const std::string& path, const std::vector<uint16_t>& tokens) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(tokens.data()), tokens.size() * sizeof(uint16_t));
}

TEST(WorkerRun, TrainsOnATokenFile) {
  // A repeating sequence is learnable: the loss must fall well below the uniform ln(10000).
  std::vector<uint16_t> tokens;
  for (int i = 0; i < 4096; ++i) tokens.push_back(static_cast<uint16_t>((i * 37) % 64 + 9000));
  const std::string path = temp_dir() + "/tokens.u16";
  write_tokens(path, tokens);
  const auto r = result_of(run_ranks(job({"--data", path, "--steps", "30", "--lr", "0.01"}), 2,
                                     std::chrono::seconds(180))[0]);
  EXPECT_EQ(r["state"], "SUCCEEDED");
  EXPECT_LT(r["summary"]["final_loss"].get<double>(), 5.0);
}

TEST(WorkerRun, TokenFileWithIdsOutsideTheVocabularyIsRefused) {
  const std::string path = temp_dir() + "/bad.u16";
  write_tokens(path, std::vector<uint16_t>(1000, 60000));
  const auto o = run_process(job({"--data", path}), {}, std::chrono::seconds(60));
  EXPECT_EQ(o.exit_code, 1);
  const auto r = nlohmann::json::parse(o.out);
  EXPECT_EQ(r["state"], "FAILED");
  EXPECT_NE(r["error"].get<std::string>().find("outside the vocabulary of 10000"),
            std::string::npos)
      << r.dump();
}

// --journal-dump: every rank writes its collective journal when the job ends. After a clean run
// the ranks' journals agree and every collective completed; when a peer is killed mid-job, the
// survivor's journal shows the collective that failed.
nlohmann::json load_journal(const std::string& dir, int rank) {
  std::ifstream in(dir + "/journal-rank" + std::to_string(rank) + ".json");
  EXPECT_TRUE(in.good()) << "no journal for rank " << rank << " in " << dir;
  return in.good() ? nlohmann::json::parse(in) : nlohmann::json::object();
}

TEST(WorkerRun, JournalDumpAfterSuccessAgreesAcrossRanks) {
  const std::string dir = temp_dir() + "/journal-ok";
  const auto outcomes =
      run_ranks(job({"--strategy", "bucketed", "--bucket-mb", "1", "--journal-dump", dir}), 2,
                std::chrono::seconds(120));
  ASSERT_EQ(outcomes[0].exit_code, 0) << outcomes[0].err;
  ASSERT_EQ(outcomes[1].exit_code, 0) << outcomes[1].err;
  const auto rank0 = load_journal(dir, 0), rank1 = load_journal(dir, 1);
  EXPECT_EQ(rank0["succeeded"], true);
  EXPECT_EQ(rank1["rank"], 1);
  const auto& j0 = rank0["journal"];
  EXPECT_GT(j0["last_enqueued"].get<int64_t>(), 6);  // at least a bucket per step
  EXPECT_EQ(j0["last_completed"], j0["last_enqueued"]);
  ASSERT_EQ(j0["entries"].size(), rank1["journal"]["entries"].size());
  for (size_t i = 0; i < j0["entries"].size(); ++i) {
    EXPECT_EQ(j0["entries"][i]["op"], rank1["journal"]["entries"][i]["op"]) << i;
    EXPECT_EQ(j0["entries"][i]["numel"], rank1["journal"]["entries"][i]["numel"]) << i;
  }
}

TEST(WorkerRun, JournalDumpAfterAPeersDeathShowsTheFailedCollective) {
  const std::string dir = temp_dir() + "/journal-fail";
  const int port = unused_port();
  std::vector<std::unique_ptr<BackgroundProcess>> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back(std::make_unique<BackgroundProcess>(
        job({"--steps", "100000", "--timeout", "20", "--journal-dump", dir, "--log-level", "info"}),
        std::map<std::string, std::string>{{"MASTER_ADDR", "127.0.0.1"},
                                           {"MASTER_PORT", std::to_string(port)},
                                           {"RANK", std::to_string(r)},
                                           {"WORLD_SIZE", "2"}},
        "journal-fail-rank" + std::to_string(r)));
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (ranks[1]->log().find("step=2 ") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_NE(ranks[1]->log().find("step=2 "), std::string::npos) << ranks[1]->log();
  ranks[1]->signal(SIGKILL);
  EXPECT_EQ(ranks[0]->wait(std::chrono::seconds(30)), 1) << ranks[0]->log();
  const auto dump = load_journal(dir, 0);
  EXPECT_EQ(dump["succeeded"], false);
  const auto& journal = dump["journal"];
  int failed = 0;
  for (const auto& e : journal["entries"]) failed += e["state"] == "failed";
  EXPECT_GE(failed, 1) << journal.dump();
  EXPECT_LT(journal["last_completed"].get<int64_t>(), journal["last_enqueued"].get<int64_t>());
}

}  // namespace
}  // namespace ddpd::testing
