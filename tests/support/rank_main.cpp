// ddpd-test-rank: one rank of a multi-rank test, started by the tests as a real process with
// torchrun-style variables.
//
//   ddpd-test-rank train --out PREFIX [job flags] [--tie-embeddings] [--freeze-embedding]
//     Runs the product's Trainer (the one step sequence users run) with the job flags, through
//     TrainerHooks for what the job options keep fixed, and saves what the tests compare.
//     Files, for rank R: PREFIX.rankR.init_local.pt (this rank's own initialisation),
//     PREFIX.rankR.init_synced.pt (full parameters after construction), PREFIX.rankR.gradsK.pt
//     (step K's averaged gradients; fsdp: this rank's shards), PREFIX.rankR.final.pt, and
//     PREFIX.rankR.json (the result JSON, the collective journal and model facts).
//     Faults come from the job flags' own --inject (the product's one injector), which prints
//     "ddpd: inject KIND rank R step S at unix T" to stderr as it fires.
//
//   --float64 (train, readiness, zero1) makes float64 torch's default dtype before the model is
//     built, as PyTorch's own DDP tests call model.double(): the model, its gradients, buckets and
//     optimizer state are then float64, so a different summation order (another world size,
//     another bucket split, another CPU's kernels) moves results by ~1e-16 relative instead of
//     ~6e-8, and the equivalence suites can hold tight bounds on any x86-64 CPU.
//
//   ddpd-test-rank readiness --out PREFIX --strategy overlap|bucketed [--with-unused]
//                            [--use-unused-on-odd-steps] ...
//     The hook-driven strategies on a two-layer net whose forward order differs from its
//     registration order (and, with --with-unused, a parameter the forward never uses, or uses
//     on odd steps only: added to the output's 8 columns), through
//     make_synchronizer. Per step it records the collectives launched before
//     finish_gradient_synchronization() and in all, and the averaged gradients; SGD moves the
//     parameters between steps. Files: PREFIX.rankR.gradsK.pt, PREFIX.rankR.json.
//
//   ddpd-test-rank zero1 --out PREFIX [--shard-optimizer] [--add-group-at K] ...
//     The ZeRO-1 optimizer as a unit: the same synthetic gradients on every rank, stepped by
//     ShardedOptimizer or by plain AdamW, with a parameter group added mid-run. No model step.
#include <torch/torch.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <sys/resource.h>

#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <mutex>
#include <thread>

#include "comm/predecessor_keeping_reduce_scatter.h"
#include "ddpd/common/ddp_flags.h"
#include "ddpd/common/result_json.h"
#include "ddpd/common/unix_time.h"
#include "ddpd/core/collective_buffers.h"
#include "ddpd/core/collective_journal.h"
#include "ddpd/core/communicator.h"
#include "ddpd/core/grad_sync.h"
#include "ddpd/core/model.h"
#include "ddpd/core/rendezvous.h"
#include "ddpd/core/sharded_optimizer.h"
#include "ddpd/core/trainer.h"

namespace {

std::vector<torch::Tensor> clones(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> out;
  for (const auto& t : tensors) out.push_back(t.detach().clone());
  return out;
}

std::string rank_prefix(const std::string& out, int rank) {
  return out + ".rank" + std::to_string(rank);
}

// --heal: a lost rank's survivors regroup, generation after generation, at the same endpoint
// (the test starts the replacement: --join-generation G joins generation G as its rank).
// --shrink-without R: no replacement comes; the survivors of rank R's loss go on one rank fewer,
// those above R one number lower (as the coordinator's shrinking HealGroup says).
struct HealFlags {
  bool heal = false;
  int join_generation = 0;
  int shrink_without = -1;
};

// The coordinator's part of healing, played through the store: the first survivor to regroup
// into generation G says so (key "test-heal/G"), and every other rank aborts its old group's
// collectives on seeing it, as a worker's rank does on the coordinator's HealGroup
// (worker/rank_main.cpp). A survivor may otherwise wait in a collective that only another
// survivor, gone to the new group, could complete.
class HealSignal {
 public:
  HealSignal(std::shared_ptr<ddpd::Communicator> comm, int generation)
      : store_(below_prefixes(comm->store())), current_(std::move(comm)), generation_(generation) {
    watcher_ = std::thread([this] { watch(); });
  }
  ~HealSignal() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    wake_.notify_all();
    watcher_.join();
  }

  std::shared_ptr<ddpd::Communicator> regroup(ddpd::RendezvousOptions rendezvous, int generation,
                                              ddpd::Communicator& previous, int shrink_without) {
    store_->set("test-heal/" + std::to_string(generation), std::vector<uint8_t>{1});
    if (shrink_without >= 0) {
      rendezvous.rank = previous.info().rank - (previous.info().rank > shrink_without ? 1 : 0);
      rendezvous.world_size = previous.info().world_size - 1;
    }
    auto next = ddpd::connect_generation(rendezvous, generation, &previous);
    std::lock_guard<std::mutex> lock(mutex_);
    current_ = next;
    generation_ = generation;
    return next;
  }

 private:
  // The TCPStore itself: survivors' and joiners' stores differ by their generation's prefix.
  static c10::intrusive_ptr<c10d::Store> below_prefixes(const c10::intrusive_ptr<c10d::Store>& s) {
    auto* prefixed = dynamic_cast<c10d::PrefixStore*>(s.get());
    return prefixed ? prefixed->getUnderlyingNonPrefixStore() : s;
  }

  void watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!wake_.wait_for(lock, std::chrono::milliseconds(20), [&] { return done_; })) {
      const std::string key = "test-heal/" + std::to_string(generation_ + 1);
      lock.unlock();
      bool announced = false;
      try {
        announced = store_->check({key});
      } catch (const std::exception&) {
        return;  // the store's server (rank 0) has finished: nothing more to watch
      }
      lock.lock();
      if (announced && key == "test-heal/" + std::to_string(generation_ + 1)) current_->abort();
    }
  }

  c10::intrusive_ptr<c10d::Store> store_;
  std::mutex mutex_;  // guards everything below
  std::condition_variable wake_;
  std::shared_ptr<ddpd::Communicator> current_;
  int generation_;
  bool done_ = false;
  std::thread watcher_;
};

int train(const ddpd::DdpJobOptions& options, const std::string& out, bool tie_embeddings,
          bool freeze_embedding, const HealFlags& healing) {
  const auto rendezvous = ddpd::rendezvous_for_job(options);
  const int rank = rendezvous.rank;
  const std::string prefix = rank_prefix(out, rank);
  nlohmann::json report;

  ddpd::TrainerHooks hooks;
  // --tie-embeddings ties a preset's head; an imported model keeps its config's choice.
  hooks.configure_model = [&](ddpd::ModelConfig& config) {
    if (tie_embeddings) config.tie_embeddings = true;
  };
  hooks.prepare_model = [&](ddpd::TransformerLMImpl& model) {
    if (freeze_embedding) model.named_parameters()["embedding.weight"].set_requires_grad(false);
    // An imported or resumed model's initial values are its file's; under fsdp its parameters
    // hold no memory here yet (each rank reads its shards as the synchroniser is built).
    if (options.init_from.empty() && options.resume.empty()) {
      torch::save(clones(ddpd::unique_parameters(model)), prefix + ".init_local.pt");
    }
    int64_t trainable_bytes = 0;
    for (const auto& p : ddpd::unique_trainable_parameters(model)) trainable_bytes += p.nbytes();
    report["trainable_bytes"] = trainable_bytes;
    report["head_shares_embedding"] = model.named_parameters()["head.weight"].is_same(
        model.named_parameters()["embedding.weight"]);
  };
  hooks.after_gradient_sync = [&](int64_t step, ddpd::GradientSynchronizer& sync) {
    std::vector<torch::Tensor> grads;
    for (const auto& p : sync.optimizer_parameters()) grads.push_back(p.grad().detach().clone());
    torch::save(grads, prefix + ".grads" + std::to_string(step) + ".pt");
  };

  const bool joins = healing.join_generation > 0;
  auto comm = joins ? ddpd::connect_generation(rendezvous, healing.join_generation, nullptr)
                    : ddpd::connect(rendezvous);
  ddpd::Trainer trainer(options, comm, std::move(hooks), healing.join_generation);
  if (!joins) torch::save(clones(trainer.full_parameters()), prefix + ".init_synced.pt");
  ddpd::Regroup regroup;
  std::unique_ptr<HealSignal> signal;
  if (healing.heal || joins) {
    signal = std::make_unique<HealSignal>(comm, healing.join_generation);
    regroup = [&](int generation, const ddpd::CollectiveError&, ddpd::Communicator& previous) {
      return ddpd::GroupGeneration{
          signal->regroup(rendezvous, generation, previous, healing.shrink_without),
          healing.shrink_without};
    };
  }
  // The sample ledger: a line per completed step, as the step completes, so that a rank that is
  // lost later has left its steps behind: "step first_sample samples".
  std::ofstream ledger(prefix + ".ledger");
  const auto result = trainer.run(
      [&](const ddpd::StepMetrics& m) {
        ledger << m.step << ' ' << m.first_sample << ' ' << m.samples << std::endl;
      },
      {}, regroup);
  torch::save(clones(trainer.full_parameters()), prefix + ".final.pt");
  report["result"] = ddpd::to_json(result);
  report["journal"] = ddpd::journal_json(comm->recorder().journal());
  for (const auto& [op, count] : comm->recorder().traffic()) {
    report["traffic"][op] = {{"calls", count.calls}, {"bytes", count.bytes}};
  }
  std::ofstream(prefix + ".json") << report.dump();
  return 0;
}

// Synthetic averaged gradients for step `step`: the same on every rank, as after an all-reduce.
void set_gradients(const std::vector<torch::Tensor>& params, uint64_t seed, int64_t step) {
  torch::manual_seed(seed * 1000 + static_cast<uint64_t>(step));
  for (const auto& p : params) p.mutable_grad() = torch::randn_like(p) * 0.01;
}

int zero1(const ddpd::DdpJobOptions& options, const std::string& out, int64_t add_group_at,
          bool step_in_parts) {
  const auto rendezvous = ddpd::rendezvous_for_job(options);
  auto comm = ddpd::connect(rendezvous);
  const int rank = comm->info().rank;
  torch::manual_seed(options.seed);  // the same parameters on every rank
  ddpd::TransformerLM model(options.resolved_model());
  const auto params = ddpd::unique_trainable_parameters(*model);
  torch::save(clones(params), rank_prefix(out, rank) + ".init_synced.pt");

  // The first half starts the optimizer; the rest joins as a group of its own (half the lr).
  std::vector<torch::Tensor> first(params.begin(), params.begin() + params.size() / 2);
  std::vector<torch::Tensor> rest(params.begin() + params.size() / 2, params.end());
  auto adamw = torch::optim::AdamWOptions(options.lr)
                   .betas({options.beta1, options.beta2})
                   .eps(options.eps)
                   .weight_decay(options.weight_decay);
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
  for (int64_t step = 0; step < options.steps; ++step) {
    if (step == add_group_at) {
      if (sharded) sharded->add_param_group(rest_group);
      if (plain) plain->add_param_group(rest_group);
    }
    set_gradients(params, options.seed, step);
    if (sharded && step_in_parts) {
      // Parts of three parameters, last first, as the bucketed strategy hands its buckets over.
      for (size_t end = params.size(); end > 0; end -= std::min<size_t>(end, 3)) {
        const size_t begin = end - std::min<size_t>(end, 3);
        std::vector<torch::Tensor> part;
        for (size_t i = begin; i < end; ++i) {
          if (i < first.size() || (add_group_at >= 0 && step >= add_group_at))
            part.push_back(params[i]);
        }
        if (!part.empty()) sharded->step_part(part);
      }
      sharded->finish_step();
    } else if (sharded) {
      sharded->step();
    } else {
      plain->step();
    }
  }
  torch::save(clones(params), rank_prefix(out, rank) + ".final.pt");

  nlohmann::json report;
  int64_t trainable_bytes = 0, largest = 0;
  for (const auto& p : params) {
    trainable_bytes += p.nbytes();
    largest = std::max<int64_t>(largest, p.nbytes());
  }
  report["trainable_bytes"] = trainable_bytes;
  report["largest_param_bytes"] = largest;
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
  }
  std::ofstream(rank_prefix(out, rank) + ".json") << report.dump();
  return 0;
}

// Registered `late` then `early`, applied `early` then `late`: backward makes late's gradients
// ready first, while reverse registration order puts early's (and `unused`) first.
struct OutOfOrderNet : torch::nn::Module {
  explicit OutOfOrderNet(bool with_unused) {
    late = register_module("late", torch::nn::Linear(40, 8));     // 320 + 8 elements
    early = register_module("early", torch::nn::Linear(16, 40));  // 640 + 40 elements
    // The root's own parameter: registration order lists it first, before the children's.
    if (with_unused) unused = register_parameter("unused", torch::zeros({24}));
  }
  torch::Tensor forward(const torch::Tensor& x, bool use_unused = false) {
    const auto y = late(torch::relu(early(x)));
    return use_unused ? y + unused.narrow(0, 0, 8) : y;
  }
  torch::nn::Linear late{nullptr}, early{nullptr};
  torch::Tensor unused;
};

int readiness(const ddpd::DdpJobOptions& options, const std::string& out, bool with_unused,
              bool use_unused_on_odd_steps) {
  const auto rendezvous = ddpd::rendezvous_for_job(options);
  auto comm = ddpd::connect(rendezvous);
  const int rank = comm->info().rank, world = comm->info().world_size;
  torch::manual_seed(options.seed + rank);  // the synchroniser broadcasts rank 0's
  OutOfOrderNet net(with_unused);
  ddpd::SyncOptions sync_options;
  sync_options.strategy = options.strategy;
  sync_options.bucket_size_mb = options.bucket_size_mb;
  sync_options.static_buckets = options.static_buckets;
  sync_options.find_unused_parameters = options.find_unused_parameters;
  auto sync = ddpd::make_synchronizer(net, comm, sync_options);
  nlohmann::json report;
  for (int64_t step = 0; step < options.steps; ++step) {
    torch::manual_seed(options.seed * 1000 + static_cast<uint64_t>(step));  // the global batch
    const auto inputs = torch::randn({options.batch_size, 16});
    const auto targets = torch::randn({options.batch_size, 8});
    const int64_t rows = options.batch_size / world;
    sync->zero_grad();
    const int64_t before = comm->recorder().journal().progress().last_enqueued;
    // Collectives launched by the time early's first gradient is computed (a tensor hook runs
    // before the gradient is accumulated): late's are ready by then, early's not yet.
    int64_t before_early = -1;
    std::vector<std::pair<torch::Tensor, unsigned>> hooks;
    for (auto* p : {&net.early->weight, &net.early->bias}) {
      hooks.emplace_back(*p, p->register_hook([&](const torch::Tensor& grad) {
        if (before_early < 0)
          before_early = comm->recorder().journal().progress().last_enqueued - before;
        return grad;
      }));
    }
    const bool use_unused = use_unused_on_odd_steps && step % 2 == 1;
    auto loss = torch::mse_loss(net.forward(inputs.narrow(0, rank * rows, rows), use_unused),
                                targets.narrow(0, rank * rows, rows));
    loss.backward();
    for (auto& [p, handle] : hooks) p.remove_hook(handle);
    sync->finish_gradient_synchronization();
    std::vector<torch::Tensor> grads;
    for (auto& p : sync->optimizer_parameters()) {
      // One process has no synchroniser, so an unused parameter has no gradient: zeros. Ranks
      // must reduce it as zeros, so a missing gradient there is NaN, which fails comparisons.
      grads.push_back(p.grad().defined() ? p.grad().detach().clone()
                      : world == 1       ? torch::zeros_like(p)
                                         : torch::full_like(p, std::nan("")));
    }
    torch::save(grads, rank_prefix(out, rank) + ".grads" + std::to_string(step) + ".pt");
    {
      torch::NoGradGuard no_grad;
      for (auto& p : sync->optimizer_parameters()) {
        if (p.grad().defined()) p.sub_(p.grad() * 0.1);
      }
    }
    sync->after_optimizer_step();
    nlohmann::json launches = nlohmann::json::array();
    for (const auto& e : comm->recorder().journal().entries()) {
      if (e.seq > before && e.op == "all_reduce") launches.push_back(e.numel);
    }
    report["steps"].push_back(
        {{"launched_before_early_gradients", before_early}, {"all_reduce_numels", launches}});
  }
  std::ofstream(rank_prefix(out, rank) + ".json") << report.dump();
  return 0;
}

// Every collective of the Communicator on sizes that straddle the transport's chunks and do not
// divide by the world size, in float32 and bfloat16, with values that bf16 holds exactly
// (small integers), checked against the expected sums on every rank.
int collectives(const ddpd::DdpJobOptions& options, const std::string& out) {
  const auto rendezvous = ddpd::rendezvous_for_job(options);
  auto comm = ddpd::connect(rendezvous);
  const int rank = comm->info().rank, world = comm->info().world_size;
  nlohmann::json report;
  report["transport"] = ddpd::enum_name(comm->info().transport);
  std::vector<std::string> failures;
  int64_t checks = 0;
  auto check = [&](const std::string& what, const torch::Tensor& got, const torch::Tensor& want) {
    ++checks;
    if (!torch::equal(got.to(torch::kFloat), want.to(torch::kFloat))) {
      failures.push_back(
          what + ": max |error| " +
          std::to_string(
              (got.to(torch::kFloat) - want.to(torch::kFloat)).abs().max().item<double>()));
    }
  };
  // (i % 8) + r: small integers, whose sums over ≤ 8 ranks stay exact in bf16.
  auto pattern = [](int64_t n, int r, torch::ScalarType dtype) {
    return (torch::arange(n, torch::kLong).remainder(8) + r).to(dtype);
  };
  int ranks_sum = 0;
  for (int r = 0; r < world; ++r) ranks_sum += r;
  bool shared_in_place = true;
  for (const int64_t n :
       {int64_t{1}, int64_t{7}, int64_t{1001}, int64_t{262147}, int64_t{600001}}) {
    for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
      const std::string tag =
          std::to_string(n) + (dtype == torch::kFloat ? " float32" : " bfloat16");
      auto x = pattern(n, rank, dtype);
      comm->all_reduce_sum(x, "check/all_reduce").wait();
      check("all_reduce " + tag, x, pattern(n, 0, torch::kFloat) * world + ranks_sum);

      // In a buffer the peers map (over shm): the whole of it, then a range at an odd offset.
      auto shared = allocate_collective_buffer(*comm, n + 5, torch::TensorOptions().dtype(dtype));
      shared_in_place = shared_in_place && reads_in_place(*comm, shared);
      shared.narrow(0, 0, n).copy_(pattern(n, rank, dtype));
      auto whole = shared.narrow(0, 0, n);
      comm->all_reduce_sum(whole, "check/all_reduce_shared").wait();
      check("all_reduce shared " + tag, whole, pattern(n, 0, torch::kFloat) * world + ranks_sum);
      auto part = shared.narrow(0, 5, n);
      part.copy_(pattern(n, rank, dtype));
      comm->all_reduce_sum(part, "check/all_reduce_shared_part").wait();
      check("all_reduce shared at offset 5 " + tag, part,
            pattern(n, 0, torch::kFloat) * world + ranks_sum);

      auto b = pattern(n, rank, dtype);
      comm->broadcast(b, world - 1, "check/broadcast").wait();
      check("broadcast " + tag, b, pattern(n, world - 1, torch::kFloat));

      auto gathered = torch::empty({n * world}, dtype);
      comm->all_gather(gathered, pattern(n, rank, dtype), "check/all_gather").wait();
      std::vector<torch::Tensor> expected;
      for (int r = 0; r < world; ++r) expected.push_back(pattern(n, r, torch::kFloat));
      check("all_gather " + tag, gathered, torch::cat(expected));

      auto mine = torch::empty({n}, dtype);
      const auto input = pattern(n * world, rank, dtype);
      comm->reduce_scatter_sum_async(mine, input, "check/reduce_scatter").wait();
      check("reduce_scatter " + tag, mine,
            pattern(n * world, 0, torch::kFloat).narrow(0, rank * n, n) * world + ranks_sum);
      if (ddpd::reduce_scatter_keeps_predecessor(*comm)) {  // shm: fsdp's --shard-replicas
        const int predecessor = (rank + world - 1) % world;
        auto own = torch::empty({n}, dtype), kept = torch::empty({n}, dtype);
        ddpd::reduce_scatter_sum_keeping_predecessor_async(*comm, own, kept, input,
                                                           "check/reduce_scatter_keeping")
            .wait();
        check("reduce_scatter keeping the predecessor's, own " + tag, own, mine);
        check(
            "reduce_scatter keeping the predecessor's, kept " + tag, kept,
            pattern(n * world, 0, torch::kFloat).narrow(0, predecessor * n, n) * world + ranks_sum);
      }
    }
    auto high = torch::full({n}, static_cast<float>(rank));
    comm->all_reduce(high, c10d::ReduceOp::MAX, "check/max");
    check("all_reduce max " + std::to_string(n), high, torch::full({n}, world - 1.0f));
    auto shared_high = allocate_collective_buffer(*comm, n, torch::TensorOptions());
    shared_high.fill_(static_cast<float>(rank));
    comm->all_reduce(shared_high, c10d::ReduceOp::MAX, "check/max_shared");
    check("all_reduce max shared " + std::to_string(n), shared_high,
          torch::full({n}, world - 1.0f));
    auto low = torch::full({n}, static_cast<float>(rank));
    comm->all_reduce(low, c10d::ReduceOp::MIN, "check/min");
    check("all_reduce min " + std::to_string(n), low, torch::zeros({n}));
    comm->barrier();
  }
  // broadcast_module_state from the last rank, in pieces that split tensors at odd places, one
  // piece per tensor or more, and in one piece.
  for (const int64_t chunk_bytes : {int64_t{36}, int64_t{4100}, ddpd::kBroadcastChunkBytes}) {
    torch::nn::Module module;
    for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{1001}, int64_t{3}, int64_t{6001}}) {
      module.register_parameter("p" + std::to_string(n), pattern(n, rank, torch::kFloat));
    }
    ddpd::broadcast_module_state(module, *comm, world - 1, chunk_bytes);
    for (const auto& item : module.named_parameters()) {
      const torch::Tensor& p = item.value();
      check("broadcast_module_state " + item.key() + " in " + std::to_string(chunk_bytes) +
                " B pieces",
            p, pattern(p.numel(), world - 1, torch::kFloat));
    }
  }
  report["checks"] = checks;
  report["failures"] = failures;
  report["shared_in_place"] = shared_in_place;
  report["keeps_predecessor"] = ddpd::reduce_scatter_keeps_predecessor(*comm);
  std::ofstream(rank_prefix(out, rank) + ".json") << report.dump();
  return failures.empty() ? 0 : 1;
}

// A real /dev/shm refusal on one rank: that rank's file-size limit is lowered to 0 while it
// allocates a collective buffer, so the ftruncate sizing it fails with EFBIG (SIGXFSZ ignored).
// Every rank must then fall back to private memory and name that rank; the all-reduce on the
// buffer must still be exact, and the next allocation (the limit restored) shared again.
int shared_fallback(const ddpd::DdpJobOptions& options, const std::string& out, int failing_rank) {
  const auto rendezvous = ddpd::rendezvous_for_job(options);
  auto comm = ddpd::connect(rendezvous);
  const int rank = comm->info().rank, world = comm->info().world_size;
  rlimit saved{};
  getrlimit(RLIMIT_FSIZE, &saved);
  if (rank == failing_rank) {
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit none = saved;
    none.rlim_cur = 0;
    setrlimit(RLIMIT_FSIZE, &none);
  }
  auto refused = allocate_collective_buffer(*comm, 1001, torch::TensorOptions());
  setrlimit(RLIMIT_FSIZE, &saved);
  nlohmann::json report;
  report["in_place"] = reads_in_place(*comm, refused);
  if (const auto fallback = shared_buffer_fallback(*comm)) {
    report["fallback"] = {{"rank", fallback->rank},
                          {"step", ddpd::to_string(fallback->step)},
                          {"peer", fallback->peer},
                          {"errno", fallback->error_number}};
  }
  refused.fill_(static_cast<float>(rank + 1));
  comm->all_reduce_sum(refused, "check/all_reduce_fallback").wait();
  report["sum_exact"] = torch::equal(refused, torch::full({1001}, world * (world + 1) / 2.0f));
  auto shared = allocate_collective_buffer(*comm, 1001, torch::TensorOptions());
  report["next_in_place"] = reads_in_place(*comm, shared);
  if (shared_buffer_fallback(*comm)) report["next_fallback"] = true;
  std::ofstream(rank_prefix(out, rank) + ".json") << report.dump();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ddpd::ignore_broken_pipes();
  CLI::App app{"ddpd multi-rank test helper"};
  app.require_subcommand(1);
  ddpd::DdpJobOptions options;
  std::string out;
  auto* train_cmd = app.add_subcommand("train", "Run the Trainer and save what tests compare");
  ddpd::add_ddp_flags(*train_cmd, options);
  train_cmd->add_option("--out", out)->required();
  bool tie_embeddings = false, freeze_embedding = false;
  train_cmd->add_flag("--tie-embeddings", tie_embeddings);
  train_cmd->add_flag("--freeze-embedding", freeze_embedding);
  HealFlags healing;
  train_cmd->add_flag("--heal", healing.heal, "Regroup at the same endpoint when a rank is lost");
  train_cmd->add_option("--shrink-without", healing.shrink_without,
                        "With --heal: regroup without this rank, one rank fewer");
  train_cmd->add_option("--join-generation", healing.join_generation,
                        "Join a healed group of this generation, as the rank that replaces");

  auto* readiness_cmd =
      app.add_subcommand("readiness", "overlap/bucketed launch order on an out-of-order net");
  ddpd::add_ddp_flags(*readiness_cmd, options);
  readiness_cmd->add_option("--out", out)->required();
  bool with_unused = false;
  readiness_cmd->add_flag("--with-unused", with_unused);
  bool use_unused_on_odd_steps = false;
  readiness_cmd->add_flag("--use-unused-on-odd-steps", use_unused_on_odd_steps)
      ->needs("--with-unused");

  auto* zero1_cmd = app.add_subcommand("zero1", "ShardedOptimizer against AdamW, as a unit");
  ddpd::add_ddp_flags(*zero1_cmd, options);
  zero1_cmd->add_option("--out", out)->required();
  int64_t add_group_at = -1;
  zero1_cmd->add_option("--add-group-at", add_group_at,
                        "Add the second half of the parameters as a new group before this step");
  bool step_in_parts = false;
  zero1_cmd->add_flag("--in-parts", step_in_parts,
                      "step_part() per three parameters and finish_step(), as bucketed does");
  auto* collectives_cmd =
      app.add_subcommand("collectives", "Every collective on odd sizes, both dtypes, checked");
  ddpd::add_ddp_flags(*collectives_cmd, options);
  collectives_cmd->add_option("--out", out)->required();
  auto* fallback_cmd = app.add_subcommand(
      "shared-fallback", "A collective buffer one rank cannot create: every rank falls back");
  ddpd::add_ddp_flags(*fallback_cmd, options);
  fallback_cmd->add_option("--out", out)->required();
  int failing_rank = 0;
  fallback_cmd->add_option("--failing-rank", failing_rank)->required();
  bool float64 = false;
  for (auto* command : {train_cmd, readiness_cmd, zero1_cmd}) {
    command->add_flag("--float64", float64, "Build the model in float64 (verification runs)");
  }
  CLI11_PARSE(app, argc, argv);
  if (float64) torch::set_default_dtype(caffe2::TypeMeta::Make<double>());

  try {
    if (train_cmd->parsed()) return train(options, out, tie_embeddings, freeze_embedding, healing);
    if (readiness_cmd->parsed())
      return readiness(options, out, with_unused, use_unused_on_odd_steps);
    if (collectives_cmd->parsed()) return collectives(options, out);
    if (fallback_cmd->parsed()) return shared_fallback(options, out, failing_rank);
    return zero1(options, out, add_group_at, step_in_parts);
  } catch (const ddpd::CollectiveError& e) {
    // The cause and the rank as data, for the fault tests (failure_test.cpp).
    std::cerr << "FAILED (cause " << ddpd::enum_name(e.cause()) << ", rank " << e.peer_rank()
              << "): " << e.what() << std::endl;
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "FAILED: " << e.what() << std::endl;
    return 1;
  }
}
