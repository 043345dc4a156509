// ddpctl plan's arithmetic against figures computed by hand (stated beside each check).
#include <gtest/gtest.h>

#include "bucket_advisor.h"
#include "plan.h"

namespace ddpd::plan {
namespace {

TEST(Plan, XxlMemoryByHand) {
  const FfnModel xxl;  // d_model 16384, d_ff 53248, 126 blocks
  // P = 126 * 2 * 16384 * 53248 = 219,848,638,464.
  EXPECT_EQ(xxl.parameters(), 219848638464LL);
  const auto m = memory_plan(xxl, /*activation_tokens=*/0, 80e9);
  EXPECT_DOUBLE_EQ(m.weights_bytes, 879394553856.0);     // 4P: 879.39 GB
  EXPECT_DOUBLE_EQ(m.gradients_bytes, 879394553856.0);   // 4P
  EXPECT_DOUBLE_EQ(m.optimizer_bytes, 1758789107712.0);  // 8P: two FP32 moments
  EXPECT_DOUBLE_EQ(m.state_bytes, 3517578215424.0);      // 16P: 3517.58 GB
  EXPECT_EQ(m.devices_for_state, 44);                    // 3517.58 / 80 = 43.97
  // Activations: 126 blocks * 2 bytes * (16384 + 53248) = 17,547,264 bytes per token.
  EXPECT_DOUBLE_EQ(memory_plan(xxl, 1, 80e9).activation_bytes, 17547264.0);
}

TEST(Plan, FsdpDegreeByHand) {
  const FfnModel xxl;
  // No activations: N = ceil(3517.578 / 95) = 38 on a 95 GB device.
  EXPECT_EQ(smallest_fsdp_degree(memory_plan(xxl, 0, 95e9), 95e9), 38);
  // 1024 tokens per device: A = 17.968 GB. (16P + A/2) / N + A/2 <= 95 GB →
  // N >= (3517.578 + 8.984) / (95 - 8.984) = 40.999… → 41.
  const auto m = memory_plan(xxl, 1024, 95e9);
  EXPECT_EQ(smallest_fsdp_degree(m, 95e9), 41);
  EXPECT_LE(fsdp_bytes_per_device(m, 41), 95e9);
  EXPECT_GT(fsdp_bytes_per_device(m, 40), 95e9);
  // So many tokens that the replicated half alone exceeds the device: nothing fits.
  EXPECT_EQ(smallest_fsdp_degree(memory_plan(xxl, 20000, 95e9), 95e9), 0);
}

TEST(Plan, MeshComputeBoundBatchByHand) {
  // TPU v5p as in the Scaling Book: C = 4.6e14, W = 2 * 9e10, M_X = 2, M_Y = 1; X 16, Y 4.
  // b = C / (W * M_X * Y) = 4.6e14 / 1.44e12 = 319.44 tokens per device; × 64 = 20,444.
  const auto mesh = mesh_plan(FfnModel{}, 16, 4, 4.6e14, 1.8e11, 2, 1);
  EXPECT_NEAR(mesh.min_batch_per_device, 319.444, 1e-3);
  EXPECT_NEAR(mesh.min_total_batch, 20444.44, 1e-2);
  // TP is compute-bound while Y <= F * W * M_Y / C = 53248 * 1.8e11 / 4.6e14 = 20.84.
  EXPECT_NEAR(mesh.max_tp_degree, 20.836, 1e-3);
  EXPECT_TRUE(mesh.tp_compute_bound);
  EXPECT_FALSE(mesh_plan(FfnModel{}, 2, 32, 4.6e14, 1.8e11, 2, 1).tp_compute_bound);
}

TEST(Plan, BucketAdvisorByHand) {
  // s = 1 GB, w = 1 GB/s, o = 100 us: bucket sqrt(1e9 * 1e9 * 1e-4) = 1e7 bytes, i.e. 100
  // buckets with overhead 1e9 / (100 * 1e9) + 100 * 1e-4 = 0.02 s.
  EXPECT_DOUBLE_EQ(recommended_bucket_bytes(1e9, 1e9, 1e-4), 1e7);
  EXPECT_DOUBLE_EQ(predicted_overhead_s(1e9, 1e9, 1e-4, 1e7), 0.02);
  // Larger and smaller buckets both cost more.
  EXPECT_GT(predicted_overhead_s(1e9, 1e9, 1e-4, 1e6), 0.02);            // 1000 calls: 0.101 s
  EXPECT_GT(predicted_overhead_s(1e9, 1e9, 1e-4, 1e8), 0.02);            // 10 buckets: 0.101 s
  EXPECT_DOUBLE_EQ(predicted_overhead_s(1e9, 1e9, 1e-4, 1e10), 1.0001);  // one bucket
}

TEST(BucketSimulation, TransformerTensorsInBackwardOrderCoverEveryParameterOnce) {
  ModelConfig untied = model_preset("tiny");
  ModelConfig tied = untied;
  tied.tie_embeddings = true;
  ModelConfig gqa = tied;  // an imported model's shape: grouped-query attention, q/k/v biases
  gqa.num_kv_heads = 2;
  gqa.qkv_bias = true;
  for (const ModelConfig& c : {untied, tied, gqa}) {
    const bool is_tied = c.tie_embeddings;
    const auto tensors = transformer_gradients(c);
    double bytes = 0;
    for (const auto& t : tensors) bytes += t.bytes;
    EXPECT_DOUBLE_EQ(bytes, 4.0 * count_parameters(c));
    // The embedding comes last; untied, the head (a V x d matmul) first.
    EXPECT_DOUBLE_EQ(tensors.back().bytes, 4.0 * c.vocab_size * c.d_model);
    EXPECT_EQ(tensors.back().compute > 0, is_tied);
    if (!is_tied) EXPECT_DOUBLE_EQ(tensors.front().compute, 1.0 * c.vocab_size * c.d_model);
  }
}

TEST(BucketSimulation, ByHand) {
  // Three 1 MiB tensors, compute 1, 1, 0, over a 1 s backward: ready at 0.5, 1.0, 1.0 s. An
  // all-reduce costs 0.1 s + 0.1 s per MiB.
  constexpr double kMiB = 1 << 20;
  const std::vector<GradientTensor> tensors{{kMiB, 1}, {kMiB, 1}, {kMiB, 0}};
  const AllReduceTime cost = [](double bytes) { return 0.1 + 0.1 * bytes / kMiB; };
  // 1 MB buckets, one tensor each, full speed during backward: the first ends at 0.7, the
  // second starts at 1.0 and ends at 1.2, the third at 1.4: 0.4 s after backward.
  EXPECT_NEAR(simulated_exposed_s(tensors, 1.0, 1, cost, 1.0), 0.4, 1e-12);
  // Half speed during backward: the first needs 0.4 s of backward (0.5 -> 0.9); the rest as before.
  EXPECT_NEAR(simulated_exposed_s(tensors, 1.0, 1, cost, 0.5), 0.4, 1e-12);
  // 10 MB buckets: the core's first bucket holds at most 1 MiB, so the first tensor alone
  // (0.5 -> 0.7), then the other two at 1.0 (-> 1.3).
  EXPECT_NEAR(simulated_exposed_s(tensors, 1.0, 10, cost, 1.0), 0.3, 1e-12);
  // Quarter-MiB tensors all fit the first bucket: one all-reduce after backward, 0.175 s.
  const std::vector<GradientTensor> small{{kMiB / 4, 1}, {kMiB / 4, 1}, {kMiB / 4, 0}};
  EXPECT_NEAR(simulated_exposed_s(small, 1.0, 10, cost, 0.5), 0.175, 1e-12);
  // Interpolated measurements: halfway between (100, 1 s) and (300, 2 s); beyond, at beta.
  const auto measured = interpolated_all_reduce_time({{300, 2.0}, {100, 1.0}}, 100);
  EXPECT_DOUBLE_EQ(measured(200), 1.5);
  EXPECT_DOUBLE_EQ(measured(50), 1.0);
  EXPECT_DOUBLE_EQ(measured(400), 3.0);
}

TEST(Plan, StrategyMemoryByHand) {
  // d_model 256, d_ff 1024, 8 blocks, vocab 10000: a block is 4·256² + 3·256·1024 + 2·256 =
  // 1,049,088 parameters (4,196,352 B); the embedding 2,560,000 (10,240,000 B); the head with
  // the final norm 2,560,256 (10,241,024 B); P = 13,512,960 (54,051,840 B).
  const TransformerShape model;
  EXPECT_EQ(model.parameters(), 13512960);
  const auto rows = strategy_memory(model, /*world=*/2, /*prefetch=*/1, /*gloo=*/false);
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_EQ(rows[0].strategy, "bucketed");
  EXPECT_DOUBLE_EQ(rows[0].optimizer_bytes, 2 * 54051840.0);
  EXPECT_DOUBLE_EQ(rows[1].optimizer_bytes, 54051840.0);      // ZeRO-1 at world 2: half
  EXPECT_DOUBLE_EQ(rows[2].peak_gradient_bytes, 54051840.0);  // one unit, reduced into the shard
  // Per block, prefetch 1: the head with one block (10,241,024 + 4,196,352), more than two
  // blocks; gradients: two units' (docs/fsdp.md "The two-unit bound"), the largest pair the head
  // and the last block (14,437,376), more than block 0 and the embedding (14,436,352).
  EXPECT_EQ(rows[3].strategy, "fsdp-block");
  EXPECT_DOUBLE_EQ(rows[3].peak_parameter_bytes, 14437376.0);
  EXPECT_DOUBLE_EQ(rows[3].peak_gradient_bytes, 14437376.0);
  EXPECT_DOUBLE_EQ(rows[4].peak_gradient_bytes, 14437376.0);
  // Over Gloo at world 2 the reduce-scatter receives into the shard: the same; at world 4 each
  // unit in flight adds one chunk of a quarter of it.
  EXPECT_DOUBLE_EQ(strategy_memory(model, 2, 1, /*gloo=*/true)[3].peak_gradient_bytes, 14437376.0);
  const auto gloo4 = strategy_memory(model, 4, 1, /*gloo=*/true);
  EXPECT_DOUBLE_EQ(gloo4[2].peak_gradient_bytes, 54051840.0 * 1.25);
  EXPECT_DOUBLE_EQ(gloo4[3].peak_gradient_bytes, 14437376.0 * 1.25);
  EXPECT_DOUBLE_EQ(strategy_memory(model, 4, 1, /*gloo=*/false)[3].peak_gradient_bytes, 14437376.0);
  EXPECT_DOUBLE_EQ(rows[4].peak_parameter_bytes, 54051840.0);  // kept after forward: all
  // Tied: the embedding unit holds the head too and stays gathered with two blocks.
  TransformerShape tied = model;
  tied.tied = true;
  EXPECT_DOUBLE_EQ(strategy_memory(tied, 2, 1, false)[3].peak_parameter_bytes,
                   10240000.0 + 1024.0 + 2 * 4196352.0);
  // Its gradient lives the whole backward, beside two blocks'.
  EXPECT_DOUBLE_EQ(strategy_memory(tied, 2, 1, false)[3].peak_gradient_bytes,
                   10240000.0 + 1024.0 + 2 * 4196352.0);
}

TEST(Plan, AnImportedShapeCountsGroupedQueryAttentionAndBiases) {
  // 8 heads of 32 sharing 2 KV heads, q/k/v biases: q and o are 256², k and v 256·64 each,
  // biases 256 + 2·64; the rest of a block as before (3·256·1024 + 2·256).
  TransformerShape gqa;
  gqa.heads = 8;
  gqa.kv_heads = 2;
  gqa.qkv_bias = true;
  const int64_t block = 2 * 256 * 256 + 2 * 256 * 64 + (256 + 2 * 64) + 3 * 256 * 1024 + 2 * 256;
  EXPECT_EQ(gqa.block_parameters(), block);
  EXPECT_EQ(gqa.parameters(), count_parameters(gqa.config()));
  EXPECT_LT(gqa.parameters(), TransformerShape{}.parameters());
}

}  // namespace
}  // namespace ddpd::plan

namespace ddpd::plan {
namespace {

// `ddpctl plan memory`'s predicted peaks: every strategy, ± ZeRO-1 and replicas, under each
// checkpointing, are the admission's own prediction (memory_estimate.h) of that job.
TEST(PlanPeak, EveryWayIsTheAdmissionsPrediction) {
  DdpJobOptions job;
  job.batch_size = 12;
  const auto rows = peak_memory(job, 3, /*shm=*/true);
  ASSERT_EQ(rows.size(), 24u);  // 8 ways × 3 checkpointing modes
  for (const auto& row : rows) {
    DdpJobOptions o = job;
    o.strategy = row.strategy == "fsdp"      ? Strategy::kFsdp
                 : row.strategy == "naive"   ? Strategy::kNaive
                 : row.strategy == "flat"    ? Strategy::kFlat
                 : row.strategy == "overlap" ? Strategy::kOverlap
                                             : Strategy::kBucketed;
    o.shard_optimizer = row.strategy == "bucketed+zero1";
    o.shard_replicas = row.shard_replicas;
    o.activation_checkpointing = row.checkpointing;
    EXPECT_EQ(row.estimate.total(), estimate_rank_memory(o, 3, true).total()) << row.strategy;
  }
  // Checkpointing never raises the peak, and sharding never does.
  for (size_t i = 0; i < rows.size(); i += 3) {
    EXPECT_LE(rows[i + 2].estimate.total(), rows[i].estimate.total()) << rows[i].strategy;
  }
  EXPECT_LT(rows[18].estimate.total(), rows[9].estimate.total());  // fsdp below bucketed
}

}  // namespace
}  // namespace ddpd::plan
