// The predicted peak of a rank (common/memory_estimate.h) against figures derived by hand from
// the model's arithmetic, and the admission's refusal: the peak, the limit and the flag that
// makes the job fit. tests/multirank/memory_prediction_test.cpp compares it with the allocator.
#include <gtest/gtest.h>

#include <string>

#include "ddpd/common/memory_estimate.h"

namespace ddpd {
namespace {

// tiny: d 64, d_ff 256, 2 layers, 4 heads (q = d), vocab 10000; batch 8, context 64, naive
// attention. P = 10000·64 + 2·(4·64² + 3·64·256 + 2·64) + 10000·64 + 64 = 1,411,392.
constexpr int64_t kP = 1411392;
// The head unit (final norm and head): 10000·64 + 64.
constexpr int64_t kHeadUnit = 640064;

TEST(MemoryEstimate, TinyByHandAtTheLossBackward) {
  DdpJobOptions o;
  const auto one = estimate_rank_memory(o, 1);
  EXPECT_STREQ(one.phase, "loss backward");
  EXPECT_EQ(one.parameter_bytes, 4 * kP);
  EXPECT_EQ(one.gradient_bytes, 0);  // zero_grad dropped them; backward has made none yet
  EXPECT_EQ(one.optimizer_bytes, 8 * kP);
  // 512 tokens. Per block 512·(6·64 + 4·64 + 4·256) floats and the probabilities 8·4·64²;
  // the edges 3·512·64; the loss 3·512·10000.
  const int64_t per_block = 512 * (6 * 64 + 4 * 64 + 4 * 256) + 8 * 4 * 64 * 64;
  EXPECT_EQ(one.activation_bytes, 4 * (2 * per_block + 3 * 512 * 64 + 3 * 512 * 10000));
  EXPECT_EQ(one.shared_bytes, 0);
  EXPECT_EQ(one.total(), one.tensor_bytes());

  // Block checkpointing keeps each block's input only.
  o.activation_checkpointing = ActivationCheckpointing::kBlock;
  EXPECT_EQ(estimate_rank_memory(o, 1).activation_bytes,
            4 * (2 * 512 * 64 + 3 * 512 * 64 + 3 * 512 * 10000));
  // Selective: the attention core's probabilities are recomputed, not kept.
  o.activation_checkpointing = ActivationCheckpointing::kSelective;
  EXPECT_EQ(estimate_rank_memory(o, 1).activation_bytes,
            4 * (2 * (per_block - 8 * 4 * 64 * 64) + 3 * 512 * 64 + 3 * 512 * 10000));
}

TEST(MemoryEstimate, StrategiesShardAndTheTransportMovesTheBuckets) {
  DdpJobOptions o;
  // bucketed at world 2: the buckets (4P) are tensors over Gloo, shared segments over shm.
  const auto gloo = estimate_rank_memory(o, 2, /*shm=*/false);
  const auto shm = estimate_rank_memory(o, 2, /*shm=*/true);
  EXPECT_EQ(gloo.gradient_bytes, 4 * kP);
  EXPECT_EQ(shm.gradient_bytes, 0);
  EXPECT_EQ(shm.shared_bytes, 4 * kP);
  EXPECT_EQ(gloo.total(), shm.total());
  // ZeRO-1 halves the moments at world 2; --shard-replicas 1 keeps the predecessor's too.
  o.shard_optimizer = true;
  EXPECT_EQ(estimate_rank_memory(o, 2).optimizer_bytes, 4 * kP);
  o.shard_replicas = 1;
  EXPECT_EQ(estimate_rank_memory(o, 4).optimizer_bytes, 2 * (8 * kP / 4));
  o.shard_replicas = 0;
  o.shard_optimizer = false;
  // fsdp at world 2: the shards, and the head unit still gathered when backward starts.
  o.strategy = Strategy::kFsdp;
  const auto fsdp = estimate_rank_memory(o, 2);
  EXPECT_EQ(fsdp.parameter_bytes, 4 * (kP / 2 + kHeadUnit));
  EXPECT_EQ(fsdp.gradient_bytes, 4 * (kP / 2));
  EXPECT_EQ(fsdp.optimizer_bytes, 8 * kP / 2);
  o.shard_replicas = 1;  // the predecessor's weights and moments; its gradients are not kept
  EXPECT_EQ(estimate_rank_memory(o, 4).optimizer_bytes, 2 * (8 * kP / 4));
  // Over shm: over Gloo at world 4 each unit in flight adds a chunk and moves the peak.
  EXPECT_EQ(estimate_rank_memory(o, 4, /*shm=*/true).gradient_bytes, 4 * (kP / 4));
  o.shard_replicas = 0;
  o.reshard_after_forward = false;  // every unit stays gathered
  EXPECT_EQ(estimate_rank_memory(o, 2).parameter_bytes, 4 * (kP / 2 + kP));
  // A context of 10^8 squares past any machine, without overflowing.
  o.context_length = 100000000;
  EXPECT_GT(estimate_rank_memory(o, 1).activation_bytes, int64_t{1} << 60);
}

std::string refusal(const DdpJobOptions& o, int world, int64_t limit, std::string* flag) {
  try {
    check_fits_in_memory(o, world, limit, "the largest worker's memory");
  } catch (const OptionError& e) {
    *flag = e.flag();
    return e.what();
  }
  return "admitted";
}

// Activations dominate (the logits): only a smaller batch fits. World 2, batch 64: 32 rows of
// 64 tokens per rank, 2,178,048 floats (8.712 MB) of activations per row (the loss backward's
// instant: 1664 per token and 16384 probabilities per block, 192 of edges and 30000 of loss per
// token), beside 16P bytes of weights, buckets and moments (22.58 MB). Under 200 MB: 20 rows.
TEST(MemoryEstimate, TheRefusalNamesTheBatchThatFits) {
  DdpJobOptions o;
  o.batch_size = 64;
  EXPECT_EQ(estimate_rank_memory(o, 2).total(), 16 * kP + 4 * 32 * int64_t{2178048});
  std::string flag;
  const std::string what = refusal(o, 2, 200000000, &flag);
  EXPECT_EQ(flag, "--batch") << what;
  EXPECT_NE(what.find("needs about 0.30 GB per rank at its peak"), std::string::npos) << what;
  EXPECT_NE(what.find("the largest worker's memory (0.20 GB)"), std::string::npos) << what;
  EXPECT_NE(what.find("it fits with --batch 40 ("), std::string::npos) << what;
  EXPECT_EQ(what.find("--strategy fsdp ("), std::string::npos) << what;
  EXPECT_EQ(what.find("--activation-checkpointing block ("), std::string::npos) << what;
  EXPECT_EQ(refusal(o, 2, 16 * kP + 4 * 32 * int64_t{2178048}, &flag), "admitted");
  EXPECT_EQ(refusal(o, 2, 0, &flag), "admitted");  // no limit known
}

// Weights and moments dominate: sharding them is what fits.
TEST(MemoryEstimate, TheRefusalNamesFsdpWhenTheStateIsTooLarge) {
  DdpJobOptions o;
  o.d_model = 1024;
  o.d_ff = 4096;
  o.num_layers = 8;
  o.batch_size = 4;
  o.context_length = 16;
  std::string flag;
  const std::string what = refusal(o, 4, 1000000000, &flag);
  EXPECT_EQ(flag, "--strategy") << what;
  EXPECT_NE(what.find("it fits with --strategy fsdp ("), std::string::npos) << what;
  EXPECT_EQ(what.find("--batch"), std::string::npos) << what;
  // At world 1 nothing shards: the refusal names what made the job large.
  EXPECT_NE(refusal(o, 1, 1000000000, &flag).find("no single flag"), std::string::npos);
  EXPECT_EQ(flag, "--d-model");
}

// Long context with naive attention: recomputing each block fits, as would a smaller batch.
TEST(MemoryEstimate, TheRefusalNamesCheckpointingAtLongContext) {
  DdpJobOptions o;
  o.vocab_size = 1000;
  o.context_length = 1024;
  const auto none = estimate_rank_memory(o, 2);
  DdpJobOptions block = o;
  block.activation_checkpointing = ActivationCheckpointing::kBlock;
  const auto checkpointed = estimate_rank_memory(block, 2);
  ASSERT_LT(checkpointed.total(), none.total());
  std::string flag;
  const std::string what = refusal(o, 2, checkpointed.total(), &flag);
  EXPECT_EQ(flag, "--activation-checkpointing") << what;
  EXPECT_NE(what.find("it fits with --activation-checkpointing block ("), std::string::npos)
      << what;
  const auto remedies = memory_remedies(o, 2, checkpointed.total());
  ASSERT_FALSE(remedies.empty());
  EXPECT_EQ(remedies.front().total_bytes, checkpointed.total());
}

}  // namespace
}  // namespace ddpd
