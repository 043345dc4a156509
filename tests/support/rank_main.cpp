// ddpd-test-rank: one rank of a multi-rank test, started by the tests as a real process with
// torchrun-style variables. It composes the public training-core pieces (model, synchroniser,
// optimizer) so tests can vary what the trainer keeps fixed (frozen and tied parameters,
// parameter groups added mid-run, a rank that dies), and saves tensors for the test to compare.
//
// Files written, for rank R: PREFIX.rankR.init_local.pt (this rank's own initialisation),
// PREFIX.rankR.init_synced.pt (full parameters after construction), PREFIX.rankR.grads0.pt (the
// first step's averaged gradients), PREFIX.rankR.final.pt,
// PREFIX.rankR.json (optimizer ownership and communication accounting).
#include <torch/torch.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <iostream>
#include <thread>

#include "ddpd/ddp_flags.h"
#include "ddpd/grad_sync.h"
#include "ddpd/model.h"
#include "ddpd/rendezvous.h"
#include "ddpd/sharded_optimizer.h"
#include "token_data.h"

namespace {

std::vector<torch::Tensor> clones(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> out;
  for (const auto& t : tensors) out.push_back(t.detach().clone());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ddpd multi-rank test helper"};
  ddpd::DdpJobOptions options;
  ddpd::add_ddp_flags(app, options);
  std::string out_prefix;
  bool freeze_embedding = false, tie_embeddings = false;
  int64_t add_group_at = -1, die_at = -1, hang_at = -1;
  app.add_option("--out", out_prefix)->required();
  app.add_flag("--freeze-embedding", freeze_embedding);
  app.add_flag("--tie-embeddings", tie_embeddings);
  app.add_option("--add-group-at", add_group_at,
                 "Start the optimizer with the first half of the parameters; add the rest as a "
                 "new group (half the lr) before this step");
  app.add_option("--die-at", die_at, "Rank 1 exits at this step");
  app.add_option("--hang-at", hang_at, "Rank 1 stops responding at this step");
  CLI11_PARSE(app, argc, argv);

  try {
    auto rendezvous = ddpd::rendezvous_from_environment();
    rendezvous.timeout =
        std::chrono::milliseconds(static_cast<int64_t>(options.collective_timeout_s * 1000));
    ddpd::validate(options, rendezvous.world_size);
    auto comm = ddpd::connect(rendezvous);
    const int rank = comm->rank();
    const std::string prefix = out_prefix + ".rank" + std::to_string(rank);
    at::set_num_threads(1);

    auto config = options.resolved_model();
    config.tie_embeddings = tie_embeddings;
    torch::manual_seed(options.seed + rank);
    ddpd::TransformerLM model(config);
    if (freeze_embedding) model->named_parameters()["embedding.weight"].set_requires_grad(false);
    torch::save(clones(model->parameters()), prefix + ".init_local.pt");

    ddpd::SyncOptions sync_options;
    sync_options.strategy =
        comm->world_size() == 1 ? ddpd::Strategy::kNaive : ddpd::parse_strategy(options.strategy);
    sync_options.bucket_size_mb = options.bucket_size_mb;
    auto sync = ddpd::make_synchronizer(*model, comm, sync_options);
    torch::save(clones(sync->full_parameters()), prefix + ".init_synced.pt");

    auto params = sync->optimizer_parameters();
    std::vector<torch::Tensor> first = params, rest;
    if (add_group_at >= 0) {
      first.assign(params.begin(), params.begin() + params.size() / 2);
      rest.assign(params.begin() + params.size() / 2, params.end());
    }
    auto adamw = torch::optim::AdamWOptions(options.lr).weight_decay(options.weight_decay);
    auto rest_options = std::make_unique<torch::optim::AdamWOptions>(adamw);
    rest_options->lr(options.lr / 2);
    const torch::optim::OptimizerParamGroup rest_group(rest, std::move(rest_options));
    std::unique_ptr<ddpd::ShardedOptimizer> sharded;
    std::unique_ptr<torch::optim::AdamW> plain;
    if (options.shard_optimizer) {
      sharded = std::make_unique<ddpd::ShardedOptimizer>(
          std::vector<torch::optim::OptimizerParamGroup>{torch::optim::OptimizerParamGroup(first)},
          ddpd::adamw_factory(adamw), comm);
    } else {
      plain = std::make_unique<torch::optim::AdamW>(first, adamw);
    }

    ddpd::detail::TokenBatches data(options, config.vocab_size);
    const int64_t local = options.batch_size / comm->world_size();
    int64_t synced_bytes = 0;
    for (int64_t step = 0; step < options.steps; ++step) {
      if (rank == 1 && step == die_at) std::_Exit(3);
      if (rank == 1 && step == hang_at) {  // silent for 4x a 5 s timeout, then gone
        std::this_thread::sleep_for(std::chrono::seconds(20));
        std::_Exit(4);
      }
      if (step == add_group_at) {
        if (sharded) sharded->add_param_group(rest_group);
        if (plain) plain->add_param_group(rest_group);
      }
      auto batch = data.next_global_batch().narrow(0, rank * local, local);
      comm->take_spans();
      sync->zero_grad();
      sync->prepare_forward();
      auto loss =
          ddpd::language_model_loss(model->forward(batch.narrow(1, 0, options.context_length)),
                                    batch.narrow(1, 1, options.context_length));
      loss.backward();
      sync->finish_gradient_synchronization();
      if (step == 0) {  // the averaged gradients (fsdp: this rank's gradient shards)
        std::vector<torch::Tensor> grads;
        for (const auto& p : sync->optimizer_parameters())
          grads.push_back(p.grad().detach().clone());
        torch::save(grads, prefix + ".grads0.pt");
      }
      synced_bytes = 0;
      for (const auto& span : comm->take_spans()) {
        if (span.name.rfind("all_reduce", 0) == 0) synced_bytes += span.bytes;
      }
      if (sharded) {
        sharded->step();
      } else {
        plain->step();
      }
      sync->after_optimizer_step();
    }
    torch::save(clones(sync->full_parameters()), prefix + ".final.pt");

    nlohmann::json report;
    int64_t trainable_bytes = 0;
    for (const auto& p : ddpd::unique_trainable_parameters(*model)) trainable_bytes += p.nbytes();
    report["trainable_bytes"] = trainable_bytes;
    report["all_reduced_bytes_last_step"] = synced_bytes;
    report["head_shares_embedding"] = model->named_parameters()["head.weight"].is_same(
        model->named_parameters()["embedding.weight"]);
    if (sharded) {
      int owned_count = 0;
      int64_t owned_bytes = 0;
      for (const auto& p : params) {
        if (sharded->owner_of(p) == rank) {
          ++owned_count;
          owned_bytes += p.nbytes();
        }
      }
      report["owned_param_count"] = owned_count;
      report["owned_bytes"] = owned_bytes;
      report["owned_bytes_per_rank"] = sharded->owned_bytes_per_rank();
      report["state_entries"] = sharded->local_optimizer().state().size();
      report["state_bytes"] = ddpd::optimizer_state_bytes(sharded->local_optimizer());
      int64_t largest = 0;
      for (const auto& p : params) largest = std::max<int64_t>(largest, p.nbytes());
      report["largest_param_bytes"] = largest;
    }
    std::ofstream(prefix + ".json") << report.dump();
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "FAILED: " << e.what() << std::endl;
    return 1;
  }
}
