// The result JSON's typed readers against its writers: every field written comes back, a
// missing field is named with its path, and the comm table reads the figures it prints from the
// typed result.
#include <gtest/gtest.h>

#include "ddpd/common/comm_options.h"
#include "ddpd/common/comm_table.h"
#include "ddpd/common/result_json.h"

namespace ddpd {
namespace {

TrainingResult training_result_setting_every_field() {
  TrainingResult r;
  r.synchronization = "bucketed";
  r.transport = GroupTransport::kShm;
  r.transport_note = "auto chose shm";
  r.shared_buffers_fallback = SharedBufferFallback{2, SharedBufferStep::kMap, 0, 12};
  r.optimizer_sharding = true;
  r.micro_batches = 3;
  r.gradient_wire_dtype = "bf16";
  for (int64_t i = 0; i < 2; ++i) {
    StepMetrics s;
    s.step = i;
    s.loss = 5.5 - i;
    s.step_seconds = 0.25 + i;
    s.forward_seconds = 0.125;
    s.backward_seconds = 0.0625;
    s.optimizer_seconds = 0.03125;
    s.comm_seconds = 0.015625;
    s.exposed_comm_seconds = 0.0078125;
    s.comm_fraction = 0.1 * (i + 1);
    s.tokens_per_second = 4096;
    s.gradient_sync_bytes = 123456789012;
    s.checkpoint_seconds = i == 1 ? 0.5 : 0;
    s.lr = 3e-4;
    if (i == 1) {
      s.grad_norm = 1.5;
      s.param_spread = 1e-7;
      s.eval_loss = 4.25;
    }
    r.steps.push_back(s);
  }
  r.summary = {4.5, 0.75, 0.01, 1e-7, 8192, 0.15};
  r.memory.after_init = {1, 2, 3, 4};
  r.memory.before_step = {5, 6, 7, 8};
  r.memory.after_step = {9, 10, 11, 12};
  r.memory.step_peak_unsharded_bytes = 13;
  r.memory.step_peak_unsharded_parameter_bytes = 14;
  r.memory.step_peak_unsharded_gradient_bytes = 15;
  r.memory.step_peak_full_gradient_units = 16;
  r.memory.loading_peak_rss_rise_bytes = 17;
  r.memory.step_peak_tensor_bytes = 18;
  r.memory.step_peak_activation_bytes = 19;
  r.profile.host_cores = 2;
  r.profile.gradients = {{"blocks.0.w1", 4096}, {"head", 8192}};
  ProfiledStep p;
  p.step = 1;
  p.step_s = 0.25;
  p.zero_grad_s = 0.001;
  p.forward_s = 0.1;
  p.backward_s = 0.12;
  p.last_backward_start_s = 0.101;
  p.last_backward_end_s = 0.221;
  p.synced_s = 0.23;
  p.optimizer_s = 0.02;
  p.overlapped_optimizer_s = 0.011;
  p.ready_s = {0.12, -1.0};
  p.collectives = {{"all_reduce/bucket0", Collective::kAllReduce, 12288, 0.2, 0.21},
                   {"broadcast/owner1", Collective::kBroadcast, 4096, 0.23, 0.24}};
  r.profile.steps = {p};
  return r;
}

CommBenchResult comm_result_with_two_sizes() {
  CommBenchResult r;
  r.world_size = 2;
  r.transport = GroupTransport::kShm;
  r.shared_buffers_fallback = SharedBufferFallback{1, SharedBufferStep::kCreate, -1, 28};
  r.loopback = {2e9, 1.5e9, 2.5e9};
  r.memory_by_size[1 << 20] = {{10e9, 9e9, 11e9}, {20e9, 19e9, 21e9}};
  r.memory_by_size[1 << 24] = {{8e9, 7e9, 9e9}, {16e9, 15e9, 17e9}};
  for (int64_t size : {int64_t{1} << 20, int64_t{1} << 24}) {
    CommRow row;
    row.collective = CommSeries::kAllReduce;
    row.size_bytes = size;
    row.rank_mean_s = {1e-3, 2e-3};
    row.rank_std_s = {1e-5, 2e-5};
    row.rank_min_s = {0.5e-3, 1.5e-3};
    row.rank_max_s = {2e-3, 3e-3};
    row.time_s = 2e-3;
    // At 16 MiB, above the in-place ceiling's best trial (17 GB/s): flagged. At world 2 busbw
    // is algbw (the factor 2(N-1)/N is 1).
    row.busbw_bytes_per_s = size == (1 << 20) ? 5e9 : 18e9;
    row.algbw_bytes_per_s = row.busbw_bytes_per_s;
    row.data_ok = true;
    r.rows.push_back(row);
  }
  r.fits.push_back({CommSeries::kAllReduce, 25e-6, 6e9, 0.05});
  return r;
}

// Writing what was read gives back what was written: every field survives the round trip.
TEST(ResultJson, TrainingResultRoundTripsEveryField) {
  const nlohmann::json written = to_json(training_result_setting_every_field());
  const TrainingResult read = training_result_from_json(written);
  EXPECT_EQ(to_json(read), written);
  EXPECT_EQ(read.steps[1].grad_norm, 1.5);
  EXPECT_FALSE(read.steps[0].grad_norm.has_value());
  EXPECT_EQ(read.steps[0].gradient_sync_bytes, 123456789012);  // int64 beyond 2^32, exact
  ASSERT_EQ(read.profile.steps.size(), 1u);
  EXPECT_EQ(read.profile.steps[0].collectives[1].name, "broadcast/owner1");
  EXPECT_EQ(read.profile.steps[0].collectives[1].op, Collective::kBroadcast);  // from the name
  EXPECT_EQ(read.profile.steps[0].ready_s[1], -1.0);
  EXPECT_EQ(read.profile.gradients[1].bytes, 8192);
}

TEST(ResultJson, CommResultRoundTripsEveryField) {
  const nlohmann::json written = to_json(comm_result_with_two_sizes());
  EXPECT_EQ(to_json(comm_result_from_json(written)), written);
}

// The message reading `json` fails with (what() of the std::runtime_error), or a failure.
template <typename Read>
std::string read_error(Read read, const nlohmann::json& json) {
  try {
    read(json);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(ResultJson, AMissingOrMistypedFieldIsNamedWithItsPath) {
  const auto training = [](const nlohmann::json& j) { training_result_from_json(j); };
  const auto comm = [](const nlohmann::json& j) { comm_result_from_json(j); };
  nlohmann::json json = to_json(training_result_setting_every_field());
  json["steps"][1].erase("loss");
  EXPECT_EQ(read_error(training, json), "result JSON: steps[1].loss: missing");
  json = to_json(comm_result_with_two_sizes());
  EXPECT_EQ(json["shared_buffers_fallback"]["reason"],
            "shared buffers fell back to private memory: rank 1 could not create its buffer in "
            "/dev/shm (No space left on device, errno 28)");
  json["shared_buffers_fallback"]["step"] = "open";
  EXPECT_EQ(read_error(comm, json),
            "result JSON: shared_buffers_fallback.step: unknown shared-buffer step 'open' "
            "(create, map)");
  json = to_json(comm_result_with_two_sizes());
  json["rows"][0]["size_bytes"] = "big";
  EXPECT_EQ(read_error(comm, json), "result JSON: rows[0].size_bytes: has the wrong type (string)");
  // Enums are parsed where they are read, naming the key and the names they may take.
  json = to_json(comm_result_with_two_sizes());
  json["rows"][1]["collective"] = "all_to_all";
  EXPECT_EQ(read_error(comm, json),
            "result JSON: rows[1].collective: must be all_reduce, all_gather, reduce_scatter, "
            "broadcast or all_reduce_back_to_back, got 'all_to_all'");
  json = to_json(training_result_setting_every_field());
  json["profile"]["steps"][0]["collectives"][1][4] = "teleport";
  EXPECT_EQ(read_error(training, json),
            "result JSON: profile.steps[0].collectives[1]: must be all_reduce, all_gather, "
            "reduce_scatter or broadcast, got 'teleport'");
  // A result written before the op was recorded: four elements, the op from the name.
  json = to_json(training_result_setting_every_field());
  json["profile"]["steps"][0]["collectives"][1].erase(4);
  EXPECT_EQ(training_result_from_json(json).profile.steps[0].collectives[1].op,
            Collective::kBroadcast);
  json = to_json(training_result_setting_every_field());
  json["transport"] = "carrier pigeon";
  EXPECT_EQ(read_error(training, json),
            "result JSON: transport: must be none, gloo, shm or nccl, got 'carrier pigeon'");
}

// The table's shares are the row's rate over each ceiling measured at its size (at world 2 busbw
// and algbw are one figure): 5 GB/s at 1 MiB is 250.0 % of loopback's 2, 50.0 % of memcpy's 10
// and 25.0 % of in place's 20.
TEST(ResultJson, CommTableShowsEachRowAgainstTheCeilingsAtItsSize) {
  const std::string table =
      comm_table(comm_result_from_json(to_json(comm_result_with_two_sizes())));
  EXPECT_NE(table.find("world size 2, transport shm"), std::string::npos) << table;
  EXPECT_NE(table.find("250.0%   50.0%   25.0%  yes\n"), std::string::npos) << table;
  // 18 GB/s at 16 MiB: 900.0 % of loopback, 225.0 % of memcpy's 8, 112.5 % of in place's 16,
  // and above in place's best trial (17): flagged.
  EXPECT_NE(table.find("900.0%  225.0%  112.5%  yes  !\n"), std::string::npos) << table;
  EXPECT_NE(table.find("# ! above the transport's ceiling"), std::string::npos);
  EXPECT_NE(table.find("t(S) = 25.0 us + S / 6.000 GB/s"), std::string::npos) << table;
}

// The memory ceilings bound algbw, loopback bounds busbw. At world 4, 6 GB/s of busbw is 4 GB/s
// of algbw: 80.0 % of an in-place rate of 5 and 40.0 % of a memcpy rate of 10, under the best
// in-place trial (5.5) and so not flagged, though busbw is above it; 300.0 % of loopback's 2.
TEST(ResultJson, MemoryCeilingsBoundAlgbwAndLoopbackBoundsBusbw) {
  CommBenchResult result = comm_result_with_two_sizes();
  result.world_size = 4;
  result.memory_by_size[1 << 20] = {{10e9, 9e9, 11e9}, {5e9, 4.5e9, 5.5e9}};
  CommRow& row = result.rows[0];
  row.algbw_bytes_per_s = 4e9;
  row.busbw_bytes_per_s = 6e9;
  EXPECT_DOUBLE_EQ(fraction_of_in_place(row, result), 0.8);
  EXPECT_DOUBLE_EQ(fraction_of_memcpy(row, result), 0.4);
  EXPECT_DOUBLE_EQ(fraction_of_loopback(row, result), 3.0);
  EXPECT_FALSE(above_own_ceiling(result, row));
  row.algbw_bytes_per_s = 6e9;  // above the best in-place trial
  EXPECT_TRUE(above_own_ceiling(result, row));
  result.transport = GroupTransport::kGloo;  // then loopback is its own ceiling, against busbw
  EXPECT_TRUE(above_own_ceiling(result, row));
  row.busbw_bytes_per_s = 2.4e9;
  EXPECT_FALSE(above_own_ceiling(result, row));
}

}  // namespace
}  // namespace ddpd
