// A communicator after abort(): its collectives fail at their launch, before the backend sees
// them, so a backward whose gradient hooks launch buckets ends at its next bucket instead of
// computing on for a group that is gone (a heal's survivors, docs/healing.md). Over real Gloo
// ranks in this process; rank 1 never launches anything, so only a launch that fails at once
// can end these calls.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <string>

#include "ddpd/core/communicator.h"
#include "ddpd/core/grad_sync.h"
#include "ddpd/core/model.h"
#include "unit/gloo_ranks.h"

namespace ddpd {
namespace {

const std::chrono::milliseconds kTimeout{20000};

TEST(CommunicatorAbort, ACollectiveLaunchedAfterTheAbortFailsAtItsLaunchAndIsNeverJournaled) {
  testing::GlooRanks ranks(2, kTimeout);
  Communicator& comm = *ranks.comms[0];
  comm.abort();
  torch::Tensor values = torch::full({8}, 3.0);
  try {
    comm.all_reduce_sum(values, "all_reduce/after_abort");
    ADD_FAILURE() << "the launch returned";
  } catch (const CollectiveError& e) {
    EXPECT_EQ(enum_name(e.cause()), "aborted") << e.what();
    EXPECT_EQ(e.peer_rank(), -1) << e.what();
    EXPECT_NE(std::string(e.what()).find("collective all_reduce/after_abort abandoned"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(torch::equal(values, torch::full({8}, 3.0)));
  EXPECT_TRUE(comm.recorder().journal().entries().empty()) << "the backend saw the collective";
}

// The bucketed strategy launches each bucket from the hook of its last gradient. With one
// parameter per bucket, the first launch comes at the head's gradient, long before the
// embedding's, which backward computes last: a backward that went on would reach it.
TEST(CommunicatorAbort, ABackwardEndsAtItsFirstBucketOnceItsGroupIsAborted) {
  testing::GlooRanks ranks(2, kTimeout);
  std::shared_ptr<Communicator> comm = std::move(ranks.comms[0]);
  ModelConfig config;
  config.vocab_size = 32;
  config.d_model = 16;
  config.d_ff = 32;
  config.num_layers = 3;
  config.num_heads = 2;
  config.tie_embeddings = false;
  torch::manual_seed(0);
  TransformerLM model(config);
  SyncOptions options;
  options.strategy = Strategy::kBucketed;
  options.bucket_size_mb = 1e-6;  // a bucket per parameter
  options.static_buckets = true;
  options.same_initial_state = true;  // no broadcast at construction: rank 1 takes no part
  std::unique_ptr<GradientSynchronizer> sync = make_synchronizer(*model, comm, options);
  bool embedding_reached = false;
  model->named_parameters()["embedding.weight"].register_hook([&](const torch::Tensor& grad) {
    embedding_reached = true;
    return grad;
  });

  comm->abort();
  sync->zero_grad();
  sync->prepare_forward();
  const torch::Tensor tokens = torch::randint(config.vocab_size, {2, 9});
  const torch::Tensor logits = model->forward(tokens.narrow(1, 0, 8));
  const torch::Tensor loss = torch::nn::functional::cross_entropy(
      logits.reshape({-1, config.vocab_size}), tokens.narrow(1, 1, 8).reshape(-1));
  try {
    loss.backward();
    ADD_FAILURE() << "backward returned";
  } catch (const CollectiveError& e) {  // the hook's error, its type kept through autograd
    EXPECT_EQ(enum_name(e.cause()), "aborted") << e.what();
    EXPECT_NE(std::string(e.what()).find("collective all_reduce/bucket0 abandoned"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(embedding_reached) << "backward computed on past the aborted launch";
  EXPECT_TRUE(comm->recorder().journal().entries().empty());
}

}  // namespace
}  // namespace ddpd
