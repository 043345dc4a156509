// `ddpd-worker run comm --json` over real Gloo ranks: every collective, data checked.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "ddpd/common/comm_options.h"
#include "support/process.h"

namespace ddpd::testing {
namespace {

struct CommCase {
  int world;
  std::string transport;  // gloo | shm
  std::string dtype;
  bool shared_buffers = false;  // --shared-buffers: all-reduce buffers every rank maps
};

std::string case_name(const ::testing::TestParamInfo<CommCase>& info) {
  return info.param.transport + "_w" + std::to_string(info.param.world) + "_" + info.param.dtype +
         (info.param.shared_buffers ? "_shared" : "");
}

class CommRun : public ::testing::TestWithParam<CommCase> {};

TEST_P(CommRun, EveryCollectivePassesItsDataCheck) {
  const int world = GetParam().world;
  std::vector<std::string> command{DDPD_WORKER_BINARY,
                                   "run",
                                   "comm",
                                   "--collective",
                                   "all_reduce,all_gather,reduce_scatter,broadcast",
                                   "--sizes",
                                   "4KB,1MB,3MB",
                                   "--warmup",
                                   "1",
                                   "--iters",
                                   "3",
                                   "--json",
                                   "--transport",
                                   GetParam().transport,
                                   "--dtype",
                                   GetParam().dtype};
  if (GetParam().shared_buffers) command.push_back("--shared-buffers");
  const auto outcomes = run_ranks(command, world, std::chrono::seconds(120));
  for (int r = 0; r < world; ++r) ASSERT_EQ(outcomes[r].exit_code, 0) << outcomes[r].err;
  const auto result = nlohmann::json::parse(outcomes[0].out);
  EXPECT_EQ(result["state"], "SUCCEEDED");
  EXPECT_EQ(result["world_size"], world);
  EXPECT_EQ(result["transport"], GetParam().transport);
  // Read in place only over shm: Gloo's ranks never map each other's memory.
  EXPECT_EQ(result["shared_buffers"], GetParam().shared_buffers && GetParam().transport == "shm");
  EXPECT_GT(result["loopback_bytes_per_second"].get<double>(), 1e7);
  // 4 collectives × 3 sizes, and the all-reduce back-to-back at each size (time per call).
  ASSERT_EQ(result["rows"].size(), 15u);
  int back_to_back = 0;
  for (const auto& row : result["rows"]) {
    EXPECT_TRUE(row["data_ok"].get<bool>());
    std::string collective = row["collective"];
    if (collective == "all_reduce_back_to_back") {
      ++back_to_back;
      collective = "all_reduce";  // same bus factor
    }
    ASSERT_EQ(row["rank_mean_seconds"].size(), static_cast<size_t>(world));
    double slowest = 0;
    for (double t : row["rank_mean_seconds"]) slowest = std::max(slowest, t);
    EXPECT_DOUBLE_EQ(row["time_seconds"].get<double>(), slowest);
    const double bytes = row["size_bytes"].get<double>();
    const int element = GetParam().dtype == "float32" ? 4 : 2;
    EXPECT_EQ(static_cast<int64_t>(bytes) % (element * world), 0) << "whole elements per rank";
    EXPECT_DOUBLE_EQ(row["algbw_bytes_per_second"].get<double>(), bytes / slowest);
    EXPECT_NEAR(row["busbw_bytes_per_second"].get<double>(),
                bytes / slowest * busbw_factor(parse_enum<Collective>(collective), world),
                1e-6 * bytes / slowest);
  }
  EXPECT_EQ(back_to_back, 3);
  // One fit per collective, and the all-reduce's back-to-back fit (the bucket advisor's alpha).
  ASSERT_EQ(result["fits"].size(), 5u);
  for (const auto& fit : result["fits"]) EXPECT_GT(fit["beta_bytes_per_second"].get<double>(), 0);
  EXPECT_EQ(result["fits"][1]["collective"], "all_reduce_back_to_back");
}

// Gloo's all-to-all (the reduce-scatter on Gloo) has no bf16, so Gloo runs float32 only.
INSTANTIATE_TEST_SUITE_P(
    WorldSizes, CommRun,
    ::testing::Values(CommCase{2, "gloo", "float32"}, CommCase{3, "gloo", "float32"},
                      CommCase{2, "shm", "float32"}, CommCase{3, "shm", "bfloat16"},
                      CommCase{4, "shm", "float32"}, CommCase{4, "shm", "bfloat16"},
                      CommCase{2, "gloo", "float32", true}, CommCase{3, "shm", "float32", true},
                      CommCase{4, "shm", "bfloat16", true}),
    case_name);

TEST(CommRunBadInput, UnknownCollectiveAndBadSizeAreRefused) {
  auto o = run_process({DDPD_WORKER_BINARY, "run", "comm", "--collective", "gossip"}, {},
                       std::chrono::seconds(30));
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.err.rfind("error: --collective: must be all_reduce, all_gather, reduce_scatter or "
                        "broadcast, got 'gossip'",
                        0),
            0u)
      << o.err;
  o = run_process({DDPD_WORKER_BINARY, "run", "comm", "--sizes", "10QB"}, {},
                  std::chrono::seconds(30));
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.err.rfind("error: --sizes: unknown unit in '10QB'", 0), 0u) << o.err;
  o = run_process({DDPD_WORKER_BINARY, "run", "comm", "--backend", "mpi"}, {},
                  std::chrono::seconds(30));
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.err.rfind("error: --backend: must be gloo or nccl, got 'mpi'", 0), 0u) << o.err;
}

}  // namespace
}  // namespace ddpd::testing
