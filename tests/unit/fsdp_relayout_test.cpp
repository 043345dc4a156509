// fsdp's relayout, the core of shrinking in place (docs/healing.md), over real Gloo ranks in
// threads: N ranks train two steps with --shard-replicas 1, rank 1 is lost, and the others lay
// their shards out again as a group of N - 1. Everything moved is a copy, so
// every check is bitwise: the survivors' shards are the N ranks' shards laid out for N - 1, as
// a resume at world N - 1 would read them by their ranges, and each survivor's copy of its new
// predecessor's shard equals the original, before and after a step at N - 1.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "comm/communicator_split.h"
#include "ddpd/core/grad_sync.h"
#include "ddpd/core/model.h"
#include "gloo_ranks.h"
#include "heal/adam_state_relay.h"
#include "train/adamw_step.h"

namespace ddpd {
namespace {

constexpr int kLost = 1;

struct Rank {
  TransformerLM model{nullptr};
  std::shared_ptr<Communicator> comm;
  std::unique_ptr<GradientSynchronizer> sync;
  std::unique_ptr<torch::optim::AdamW> own;
  std::unique_ptr<torch::optim::AdamW> replica;
  torch::Tensor tokens;
};

ModelConfig small_config() {
  ModelConfig config;
  config.vocab_size = 37;  // odd sizes, so the flat layouts pad at world 3 and 2 differently
  config.d_model = 12;
  config.d_ff = 20;
  config.num_layers = 2;
  config.num_heads = 2;
  return config;
}

void train_step(Rank& r) {
  r.sync->zero_grad();
  r.sync->prepare_forward();
  const torch::Tensor logits = r.model->forward(r.tokens.narrow(1, 0, 7));
  const torch::Tensor loss = torch::nn::functional::cross_entropy(
      logits.reshape({-1, logits.size(-1)}), r.tokens.narrow(1, 1, 7).reshape(-1));
  loss.backward();
  r.sync->finish_gradient_synchronization();
  detail::fused_adamw_step(*r.own);
  detail::fused_adamw_step(*r.replica);
  r.sync->after_optimizer_step();
}

// `work` on each of `ranks`' threads at once.
void on_each(const std::vector<int>& ranks, const std::function<void(int)>& work) {
  std::vector<std::thread> threads;
  for (int r : ranks) threads.emplace_back(work, r);
  for (auto& t : threads) t.join();
}

// Each trainable parameter's whole flattened AdamW state (0: exp_avg, 1: exp_avg_sq), pieced
// together from every rank's own shard by its ranges, in registration order.
using WholeMoments = std::vector<std::array<torch::Tensor, 2>>;

WholeMoments whole_moments(std::vector<Rank>& ranks, const std::vector<int>& holders,
                           const std::vector<int64_t>& numels) {
  WholeMoments whole;
  for (int64_t n : numels) whole.push_back({torch::zeros({n}), torch::zeros({n})});
  for (int r : holders) {
    const auto pieces = ranks[r].sync->optimizer_parameters();
    const auto ranges = ranks[r].sync->optimizer_parameter_ranges();
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (ranges[i].end == ranges[i].begin) continue;
      auto& adam = static_cast<torch::optim::AdamWParamState&>(
          *ranks[r].own->state().at(pieces[i].unsafeGetTensorImpl()));
      EXPECT_EQ(adam.step(), 2);
      whole[i][0]
          .narrow(0, ranges[i].begin, ranges[i].end - ranges[i].begin)
          .copy_(adam.exp_avg().reshape(-1));
      whole[i][1]
          .narrow(0, ranges[i].begin, ranges[i].end - ranges[i].begin)
          .copy_(adam.exp_avg_sq().reshape(-1));
    }
  }
  return whole;
}

const torch::optim::AdamWParamState& state_of(torch::optim::AdamW& optimizer,
                                              const torch::Tensor& piece) {
  return static_cast<const torch::optim::AdamWParamState&>(
      *optimizer.state().at(piece.unsafeGetTensorImpl()));
}

// `holder`'s copy holds `owner`'s shard: the same ranges, values and state.
void expect_copy_equals_original(Rank& holder, Rank& owner) {
  const auto copies = sharding_of(*holder.sync).replica_parameters();
  const auto originals = owner.sync->optimizer_parameters();
  const auto copy_ranges = sharding_of(*holder.sync).replica_parameter_ranges();
  const auto original_ranges = owner.sync->optimizer_parameter_ranges();
  ASSERT_EQ(copies.size(), originals.size());
  for (size_t i = 0; i < copies.size(); ++i) {
    EXPECT_EQ(copy_ranges[i].begin, original_ranges[i].begin) << "parameter " << i;
    EXPECT_EQ(copy_ranges[i].end, original_ranges[i].end) << "parameter " << i;
    EXPECT_TRUE(torch::equal(copies[i], originals[i])) << "parameter " << i;
    const auto& copy = state_of(*holder.replica, copies[i]);
    const auto& original = state_of(*owner.own, originals[i]);
    EXPECT_EQ(copy.step(), original.step()) << "parameter " << i;
    EXPECT_TRUE(torch::equal(copy.exp_avg(), original.exp_avg())) << "parameter " << i;
    EXPECT_TRUE(torch::equal(copy.exp_avg_sq(), original.exp_avg_sq())) << "parameter " << i;
  }
}

// Where each old shard is once rank kLost of `world` is gone: its owner and its successor hold it,
// and the first of them that survives and is not `stale` sends it. In the new group's numbering;
// `stale` (old numbering, -1: none) holds nothing, as a survivor that updated past the step to go
// on at.
std::vector<OldShardHolders> holders_without_lost_rank(int world, int stale) {
  const auto new_rank = [](int old) { return old > kLost ? old - 1 : old; };
  std::vector<OldShardHolders> shards(world);
  for (int k = 0; k < world; ++k) {
    const int successor = (k + 1) % world;
    const bool owner_holds = k != kLost && k != stale;
    shards[k].provider = new_rank(owner_holds ? k : successor);
    for (int old = 0; old < world; ++old) {
      if (old != kLost) shards[k].holds.push_back(old != stale && (old == k || old == successor));
    }
  }
  return shards;
}

// A survivor past the step to go on at: its own shard and its copy, values and moments, differ.
void make_stale(Rank& r) {
  torch::NoGradGuard no_grad;
  for (const auto& [pieces, optimizer] :
       {std::pair{r.sync->optimizer_parameters(), r.own.get()},
        std::pair{sharding_of(*r.sync).replica_parameters(), r.replica.get()}}) {
    for (const auto& piece : pieces) {
      piece.detach().add_(1.0f);
      auto& adam = static_cast<torch::optim::AdamWParamState&>(
          *optimizer->state().at(piece.unsafeGetTensorImpl()));
      adam.exp_avg().add_(1.0f);
      adam.exp_avg_sq().add_(1.0f);
    }
  }
}

// Three ranks to two, and four to three (where a survivor needs only part of the unit); and four
// to three where old rank 3 is stale: every shard it needs comes from another survivor, and
// taking its own would leave its (changed) bits in the result.
struct Case {
  int world;
  int stale;  // old numbering; -1: none
};
class FsdpRelayout : public ::testing::TestWithParam<Case> {};

TEST_P(FsdpRelayout, SurvivorsHoldEveryShardLaidOutAgainAndEachCopyEqualsItsOriginal) {
  const int world = GetParam().world;
  const int stale = GetParam().stale;
  testing::GlooRanks gloo(world, std::chrono::seconds(60));
  std::vector<Rank> ranks(world);
  std::vector<int> everyone, survivors;
  for (int r = 0; r < world; ++r) {  // torch's generator is the process's: one rank at a time
    torch::manual_seed(5 + r);
    ranks[r].model = TransformerLM(small_config());
    ranks[r].tokens = torch::randint(0, small_config().vocab_size, {2, 8}, torch::kLong);
    ranks[r].comm = std::move(gloo.comms[r]);
    everyone.push_back(r);
    if (r != kLost) survivors.push_back(r);
  }
  std::vector<int64_t> numels;
  for (const auto& p : unique_trainable_parameters(*ranks[0].model)) numels.push_back(p.numel());
  on_each(everyone, [&](int r) {
    SyncOptions options;
    options.strategy = Strategy::kFsdp;
    options.shard_replicas = true;
    Rank& me = ranks[r];
    me.sync = make_synchronizer(*me.model, me.comm, options);
    me.own = std::make_unique<torch::optim::AdamW>(me.sync->optimizer_parameters(),
                                                   torch::optim::AdamWOptions(0.01));
    me.replica = std::make_unique<torch::optim::AdamW>(sharding_of(*me.sync).replica_parameters(),
                                                       torch::optim::AdamWOptions(0.01));
    for (int step = 0; step < 2; ++step) train_step(me);
  });
  std::vector<std::vector<torch::Tensor>> full(world);
  on_each(everyone, [&](int r) { full[r] = ranks[r].sync->full_parameters(); });
  const WholeMoments moments = whole_moments(ranks, everyone, numels);

  if (stale >= 0) make_stale(ranks[stale]);
  const std::vector<OldShardHolders> shards = holders_without_lost_rank(world, stale);
  std::vector<int64_t> received(world, 0);
  on_each(survivors, [&](int r) {
    Rank& me = ranks[r];
    std::shared_ptr<Communicator> next = split_group(*me.comm, survivors, "shrink");
    detail::AdamStateRelay relay(*me.own, *me.replica);
    received[r] = sharding_of(*me.sync).relayout(next, shards, relay);
    relay.adopt(me.sync->optimizer_parameters(), sharding_of(*me.sync).replica_parameters());
    me.comm = next;
  });
  if (world == 3) {
    // Each survivor received one old shard of each unit (rank 0 shard 1, rank 2 shard 0): its
    // parameter elements and two moments, float32; shard 2 is on both already.
    int64_t one_shard_bytes = 0;
    for (const auto& unit : ranks[0].model->units()) {
      int64_t numel = 0;
      for (const auto& p : unit.parameters) numel += p.numel();
      one_shard_bytes += 3 * 4 * shard_layout(numel, world).shard_numel;
    }
    for (int r : survivors) EXPECT_EQ(received[r], one_shard_bytes) << "rank " << r;
  }

  std::vector<std::vector<torch::Tensor>> after(world);
  on_each(survivors, [&](int r) { after[r] = ranks[r].sync->full_parameters(); });
  for (int r : survivors) {
    ASSERT_EQ(after[r].size(), full[0].size());
    for (size_t i = 0; i < full[0].size(); ++i) {
      EXPECT_TRUE(torch::equal(after[r][i], full[0][i])) << "rank " << r << " parameter " << i;
    }
  }
  const WholeMoments laid_out = whole_moments(ranks, survivors, numels);
  for (size_t i = 0; i < moments.size(); ++i) {
    EXPECT_TRUE(torch::equal(laid_out[i][0], moments[i][0])) << "exp_avg of parameter " << i;
    EXPECT_TRUE(torch::equal(laid_out[i][1], moments[i][1])) << "exp_avg_sq of parameter " << i;
  }
  // Each survivor's copy is of its predecessor among the survivors; so after a step too, each
  // copy stepped with its original's gradient bits.
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) on_each(survivors, [&](int r) { train_step(ranks[r]); });
    for (size_t n = 0; n < survivors.size(); ++n) {
      const int predecessor = survivors[(n + survivors.size() - 1) % survivors.size()];
      expect_copy_equals_original(ranks[survivors[n]], ranks[predecessor]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(LosingRankOne, FsdpRelayout,
                         ::testing::Values(Case{3, -1}, Case{4, -1}, Case{4, 3}),
                         [](const auto& info) {
                           return "From" + std::to_string(info.param.world) +
                                  (info.param.stale >= 0 ? "_Rank3Stale" : "");
                         });

}  // namespace
}  // namespace ddpd
