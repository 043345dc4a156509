#include "ddpd/trainer.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "ddpd/fault_injection.h"

#include "adamw_step.h"
#include "checkpoint.h"
#include "ddpd/grad_sync.h"
#include "ddpd/intervals.h"
#include "ddpd/model.h"
#include "ddpd/sharded_optimizer.h"
#include "ddpd/unix_time.h"
#include "device.h"
#include "memory.h"
#include "token_data.h"

namespace ddpd {
namespace {

// Sets LibTorch's intra-op threads and, when the BLAS in use is OpenBLAS, its thread count
// too (OpenBLAS otherwise starts one thread per core in every rank and oversubscribes).
void set_compute_threads(int threads) {
  at::set_num_threads(threads);
  using SetThreads = void (*)(int);
  if (auto fn = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    fn(threads);
  }
}

struct Phase {
  const char* name;
  double begin_s, end_s;  // communicator clock
};

// The step's phases (empty ones left out) and its collectives, as unix-time spans.
void record_spans(StepMetrics& metrics, const Communicator& comm,
                  const std::vector<CommSpan>& collectives, const std::vector<Phase>& phases) {
  metrics.spans.reserve(phases.size() + collectives.size());
  for (const auto& p : phases) {
    if (p.end_s > p.begin_s) {
      metrics.spans.push_back(
          {p.name, false, comm.unix_seconds(p.begin_s), comm.unix_seconds(p.end_s)});
    }
  }
  for (const auto& c : collectives) {
    metrics.spans.push_back(
        {c.name, true, comm.unix_seconds(c.launch_s), comm.unix_seconds(c.complete_s)});
  }
}

// Phases as TrainerProgress names them; stored as an index so progress() reads an atomic.
enum PhaseIndex : int {
  kSetup,
  kForward,
  kBackward,
  kSync,
  kOptimizer,
  kMetrics,
  kCheckpoint,
  kIdle
};
constexpr const char* kPhaseNames[] = {"setup",     "forward", "backward",   "sync",
                                       "optimizer", "metrics", "checkpoint", "idle"};

CollectiveRecord to_record(const JournalEntry& e, double now_s) {
  return {e.seq, e.op, e.tag, e.numel, e.dtype, now_s - e.enqueued_s};
}

nlohmann::json position_json(const RankPosition& p) {
  nlohmann::json j{{"phase", p.phase},
                   {"step", p.step},
                   {"last_enqueued", p.last_enqueued},
                   {"last_completed", p.last_completed}};
  if (p.oldest_pending) {
    const auto& c = *p.oldest_pending;
    j["oldest_pending"] = {{"seq", c.seq},     {"op", c.op},       {"tag", c.tag},
                           {"numel", c.numel}, {"dtype", c.dtype}, {"age_seconds", c.age_seconds}};
  }
  return j;
}

RankPosition position_from_json(const nlohmann::json& j) {
  RankPosition p{j.at("phase"), j.at("step"), j.at("last_enqueued"), j.at("last_completed"),
                 std::nullopt};
  if (j.contains("oldest_pending")) {
    const auto& c = j["oldest_pending"];
    p.oldest_pending = CollectiveRecord{c.at("seq"),   c.at("op"),    c.at("tag"),
                                        c.at("numel"), c.at("dtype"), c.at("age_seconds")};
  }
  return p;
}

}  // namespace

struct Trainer::Impl {
  DdpJobOptions options;
  TrainerHooks hooks;
  std::optional<FaultInjection> fault;  // this rank's, when --inject names it
  std::function<bool()> cancelled;      // run()'s, while it runs
  std::atomic<int> phase{kSetup};
  std::atomic<int64_t> step{0};

  void enter(PhaseIndex p) { phase.store(p, std::memory_order_relaxed); }

  // --inject at the start of `step_index`: exit, or hang (polling for cancellation).
  void inject_at_start(int64_t step_index) {
    if (!fault || step_index != fault->step || fault->kind == "slow" ||
        fault->kind == "crash-during-checkpoint") {
      return;  // slow stretches compute; crash-during-checkpoint fires in save_checkpoint
    }
    std::fprintf(stderr, "ddpd: inject %s rank %d step %lld at unix %.3f\n", fault->kind.c_str(),
                 fault->rank, static_cast<long long>(step_index), unix_now());
    std::fflush(stderr);
    if (fault->kind == "exit") std::_Exit(3);
    if (fault->kind == "skip-collective") {
      comm->skip_next_collective();
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    const auto length = std::chrono::duration<double>(fault->seconds);
    while (fault->seconds <= 0 || std::chrono::steady_clock::now() - start < length) {
      if (cancelled && cancelled()) throw JobCancelled("job cancelled");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // --inject slow: stretches this step's compute by the factor.
  void inject_slowness(int64_t step_index, double compute_seconds) {
    if (!fault || fault->kind != "slow" || step_index < fault->step) return;
    if (step_index == fault->step) {
      std::fprintf(stderr, "ddpd: inject slow rank %d step %lld at unix %.3f\n", fault->rank,
                   static_cast<long long>(step_index), unix_now());
    }
    std::this_thread::sleep_for(
        std::chrono::duration<double>((fault->factor - 1) * compute_seconds));
  }
  // --clip-grad-norm: the global norm of the synchronised gradients (each rank's fsdp shards
  // summed over ranks by one all-reduce; replicated gradients are whole on every rank, tied
  // parameters appear once), and every gradient scaled by max_norm / (norm + 1e-6) when that is
  // below 1, as torch.nn.utils.clip_grad_norm_ does. Returns the norm before clipping.
  double clip_gradients() {
    std::vector<torch::Tensor> grads;
    for (auto& p : sync->optimizer_parameters()) {
      if (p.grad().defined()) grads.push_back(p.grad());
    }
    torch::Tensor sum_of_squares = torch::zeros({1}, torch::TensorOptions().dtype(torch::kDouble));
    for (const auto& g : grads) {
      sum_of_squares += g.detach().to(torch::kCPU, torch::kDouble).pow(2).sum();
    }
    if (options.strategy == Strategy::kFsdp && comm->world_size() > 1) {
      torch::Tensor on_device = sum_of_squares.to(comm->device());
      comm->all_reduce_sum(on_device, "all_reduce/grad_norm").wait();
      sum_of_squares = on_device.cpu();
    }
    const double norm = std::sqrt(sum_of_squares.item<double>());
    const double coefficient = options.clip_grad_norm / (norm + 1e-6);
    if (coefficient < 1) {
      torch::NoGradGuard no_grad;
      for (auto& g : grads) g.mul_(coefficient);
    }
    return norm;
  }

  // The cross-rank analysis after a failed collective (see Trainer's comment).
  // After a peer's exit the survivors learn it at about the same time, so they wait 2 s for each
  // other's reports; after a timeout up to the collective timeout (at most 10 s).
  std::string analyze_failure_across_ranks(bool peer_exited) const;

  // Checkpoints (checkpoint.h). The element range of each trainable parameter that this rank's
  // optimizer parameter of the same index holds: the whole tensor, or under fsdp the part in its
  // shard (GradientSynchronizer::optimizer_parameter_ranges).
  // The model's unique parameters' names and shapes, taken before the synchroniser exists (fsdp
  // frees the full parameters between steps, leaving them empty).
  std::vector<std::pair<std::string, std::vector<int64_t>>> parameter_shapes;
  void load_parameters(detail::CheckpointReader& reader);
  void load_optimizer_state(detail::CheckpointReader& reader);
  // Saves the checkpoint of `steps_done` steps; returns its seconds (the step's stall).
  double save_checkpoint(int64_t steps_done);
  torch::optim::Optimizer& local_optimizer() {
    return sharded ? sharded->local_optimizer() : *optimizer;
  }
  bool holds_state_of(const torch::Tensor& optimizer_param) {
    return !sharded || sharded->owner_of(optimizer_param) == comm->rank();
  }
  int64_t start_step = 0;  // steps already done (a resumed checkpoint's)

  std::shared_ptr<Communicator> comm;
  TransformerLM model{nullptr};
  std::unique_ptr<GradientSynchronizer> sync;
  // Unsharded: torch's AdamW holds the options and state; fused_adamw_step updates them.
  std::unique_ptr<torch::optim::AdamW> optimizer;
  std::unique_ptr<ShardedOptimizer> sharded;  // --shard-optimizer
  // The plain optimizer steps bucket by bucket inside the gradient synchronisation: bucketed on
  // CPU with more than one rank, without ZeRO-1 (whose step is a collective of its own) and
  // without clipping (which needs every gradient's norm first). AdamW is per parameter, so the
  // result is the same as one step after the synchronisation.
  bool optimizer_steps_per_bucket = false;
  std::unique_ptr<detail::TokenSamples> data;
  std::unique_ptr<detail::TokenSamples> eval_data;  // --eval-data
  MemoryProfile memory;
  int64_t local_batch = 0;  // this rank's rows of each global batch
  int64_t micro_batch = 0;  // rows per forward/backward (local_batch / --grad-accum)

  // [rows, context + 1] tokens: this rank's rows [first_row, first_row + rows) of global batch
  // `batch` of `samples`, on the device.
  torch::Tensor rows_of(const detail::TokenSamples& samples, int64_t batch, int64_t first_row,
                        int64_t rows) const {
    return samples
        .samples(batch * options.batch_size + comm->rank() * local_batch + first_row, rows)
        .to(comm->device());
  }
  // The mean held-out loss over --eval-batches global batches (the same ones every time),
  // across ranks. A collective.
  double evaluate();

  int64_t optimizer_state() {
    return optimizer_state_bytes(sharded ? sharded->local_optimizer() : *optimizer);
  }
  MemoryBytes measure() {
    auto tensors = sync->optimizer_parameters();
    for (auto& p : model->parameters()) tensors.push_back(p);
    auto bytes = detail::measure_memory(tensors, optimizer_state());
    if (comm->device().is_cuda()) {
      bytes.peak_bytes = detail::cuda_allocator_stats(comm->device()).peak_allocated;
    }
    return bytes;
  }
};

namespace {

// LibTorch's error as one line, "out of memory: ..." first when an allocation failed.
std::string one_line(const c10::Error& error) {
  // what() carries LibTorch's C++ backtrace; the message alone is what a user can act on.
  std::string message = error.msg();
  const size_t newline = message.find('\n');
  if (newline != std::string::npos) message.resize(newline);
  const bool allocation = message.find("can't allocate memory") != std::string::npos ||
                          message.find("tried to allocate") != std::string::npos ||
                          message.find("out of memory") != std::string::npos;
  return allocation ? "out of memory: " + message : message;
}

}  // namespace

Trainer::Trainer(const DdpJobOptions& options, std::shared_ptr<Communicator> comm,
                 TrainerHooks hooks) try
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  validate(options, comm->world_size());
  const at::Device device = comm->device();
  if (device.is_cuda() != (options.device == Device::kCuda)) {
    throw OptionError("--device",
                      enum_name(options.device) + " job on a " + device.str() + " communicator");
  }
  if (options.precision == Precision::kBf16 && !detail::supports_bf16(device)) {
    throw OptionError("--precision", "bf16 needs a GPU of compute capability 8.0 or later");
  }
  m.options = options;
  m.hooks = std::move(hooks);
  m.fault = parse_fault_injection(options.inject, comm->world_size());
  if (m.fault && m.fault->rank != comm->rank()) m.fault.reset();
  m.comm = std::move(comm);
  const int world = m.comm->world_size();
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  // --threads is clamped to this host's cores: more only oversubscribes them (kMaxThreadsPerRank).
  set_compute_threads(options.threads > 0 ? std::min(options.threads, static_cast<int>(cores))
                                          : std::max(1, static_cast<int>(cores) / world));

  // Each rank initialises differently; the synchroniser broadcasts rank 0's parameters.
  torch::manual_seed(options.seed + m.comm->rank());
  // The allocator's peak is process-wide; a daemon runs many jobs, so start this job's afresh.
  if (device.is_cuda()) detail::reset_cuda_peak_stats(device);
  ModelConfig model_config = options.resolved_model();
  if (m.hooks.configure_model) m.hooks.configure_model(model_config);
  m.model = TransformerLM(model_config);
  m.model->to(device);  // before the synchroniser, whose buffers follow the parameters
  if (m.hooks.prepare_model) m.hooks.prepare_model(*m.model);
  for (const auto& [name, p] : named_unique_parameters(*m.model)) {
    m.parameter_shapes.emplace_back(name, p.sizes().vec());
  }
  if (options.checkpoint_every > 0) {
    // Every rank writes its own file: refuse at the start, not at the first checkpoint, when
    // this rank cannot (the directory must be shared by every worker of the job).
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::create_directories(options.checkpoint_dir, ec);
    const std::string probe =
        options.checkpoint_dir + "/.probe-rank-" + std::to_string(m.comm->rank());
    std::ofstream out(probe);
    if (ec || !(out << "ok") || !out.flush()) {
      throw OptionError("--checkpoint-dir", "rank " + std::to_string(m.comm->rank()) +
                                                " cannot write '" + options.checkpoint_dir +
                                                "' (every worker of the job must reach it)");
    }
    out.close();
    fs::remove(probe, ec);
  }
  std::optional<detail::CheckpointReader> resumed;
  const std::string resume_from =
      options.resume.empty() ? "" : detail::resolve_resume(options.resume, options.checkpoint_dir);
  if (!resume_from.empty()) {
    resumed.emplace(resume_from);
    m.load_parameters(*resumed);  // on every rank, before the synchroniser shards or broadcasts
  }
  SyncOptions sync_options;
  sync_options.strategy = options.strategy;
  sync_options.bucket_size_mb = options.bucket_size_mb;
  sync_options.gradient_wire = wire_dtype_of(options.grad_compression);
  sync_options.static_buckets = options.static_buckets;
  sync_options.find_unused_parameters = options.find_unused_parameters;
  sync_options.fsdp_whole_model = options.fsdp_units == FsdpUnits::kWhole;
  sync_options.fsdp_prefetch = static_cast<int>(options.fsdp_prefetch);
  sync_options.reshard_after_forward = options.reshard_after_forward;
  m.sync = make_synchronizer(*m.model, m.comm, sync_options);

  auto adamw = torch::optim::AdamWOptions(options.lr)
                   .betas({options.beta1, options.beta2})
                   .eps(options.eps)
                   .weight_decay(options.weight_decay);
  if (options.shard_optimizer) {
    std::vector<torch::optim::OptimizerParamGroup> groups{
        torch::optim::OptimizerParamGroup(m.sync->optimizer_parameters())};
    m.sharded = std::make_unique<ShardedOptimizer>(std::move(groups), adamw_factory(adamw), m.comm);
  } else {
    m.optimizer = std::make_unique<torch::optim::AdamW>(m.sync->optimizer_parameters(), adamw);
  }
  const int64_t vocab = m.model->config().vocab_size;
  m.optimizer_steps_per_bucket = m.optimizer && sync_options.strategy == Strategy::kBucketed &&
                                 world > 1 && options.clip_grad_norm == 0 && !device.is_cuda();
  m.data = std::make_unique<detail::TokenSamples>(detail::training_source(options),
                                                  options.context_length, vocab, options.seed + 1);
  if (options.eval_every > 0) {
    m.eval_data = std::make_unique<detail::TokenSamples>(
        detail::eval_source(options), options.context_length, vocab, options.seed + 2);
  }
  m.local_batch = options.batch_size / world;
  m.micro_batch = m.local_batch / options.grad_accum;
  if (resumed) {
    m.load_optimizer_state(*resumed);
    // The data continue at the saved global sample index (step s reads samples from s × batch):
    // the same global batches at any world size, none repeated or skipped.
    const int64_t position = resumed->metadata().at("data_position");
    m.start_step = resumed->metadata().at("step");
    if (position != m.start_step * options.batch_size) {
      throw OptionError("--batch", "the checkpoint's data position " + std::to_string(position) +
                                       " is not " + std::to_string(m.start_step) +
                                       " global batches of " + std::to_string(options.batch_size));
    }
    m.step.store(m.start_step);
  }
  m.memory.after_init = m.measure();
} catch (const c10::Error& e) {
  throw std::runtime_error(one_line(e) + " (building the model, synchroniser and optimizer)");
} catch (const std::bad_alloc&) {
  throw std::runtime_error(
      "out of memory: an allocation failed building the model, synchroniser and optimizer");
}

Trainer::~Trainer() = default;

void Trainer::Impl::load_parameters(detail::CheckpointReader& reader) {
  const auto& saved = reader.metadata().at("model");
  const ModelConfig& config = model->config();
  for (const auto& [key, value] : std::map<std::string, int64_t>{{"vocab_size", config.vocab_size},
                                                                 {"d_model", config.d_model},
                                                                 {"d_ff", config.d_ff},
                                                                 {"num_layers", config.num_layers},
                                                                 {"num_heads", config.num_heads}}) {
    if (saved.at(key).get<int64_t>() != value) {
      throw OptionError("--resume", "the checkpoint's model has " + key + " " +
                                        saved.at(key).dump() + ", this job's " +
                                        std::to_string(value));
    }
  }
  torch::NoGradGuard no_grad;
  for (auto& [name, p] : named_unique_parameters(*model)) {
    const std::string tensor = "param/" + name;
    if (reader.shape(tensor) != p.sizes().vec()) {
      throw OptionError("--resume", "the checkpoint's " + tensor + " has another shape");
    }
    p.copy_(reader.read(tensor, 0, p.numel()).reshape(p.sizes()).to(p.device(), p.scalar_type()));
  }
}

void Trainer::Impl::load_optimizer_state(detail::CheckpointReader& reader) {
  auto& state = local_optimizer().state();
  const auto targets = sync->optimizer_parameters();
  const auto ranges = sync->optimizer_parameter_ranges();
  size_t index = 0;
  const auto named = named_unique_parameters(*model);
  for (size_t i = 0; i < named.size(); ++i) {
    const auto& [name, full] = named[i];
    if (!full.requires_grad()) continue;
    const HeldRange range = ranges.at(index);
    const torch::Tensor& held = targets.at(index++);
    if (!holds_state_of(held) || !reader.has("exp_avg/" + name)) continue;
    auto load = [&](const std::string& kind) {
      return reader.read(kind + "/" + name, range.begin, range.end)
          .reshape(held.sizes())
          .to(held.device(), held.scalar_type());
    };
    auto adam = std::make_unique<torch::optim::AdamWParamState>();
    adam->step(reader.adam_step("exp_avg/" + name));
    adam->exp_avg(load("exp_avg"));
    adam->exp_avg_sq(load("exp_avg_sq"));
    state[held.unsafeGetTensorImpl()] = std::move(adam);
  }
}

double Trainer::Impl::save_checkpoint(int64_t steps_done) {
  // Protocol: rank 0 makes a fresh temporary directory; barrier; every rank writes and fsyncs its
  // file and index; barrier; rank 0 commits (metadata.json, rename, `latest`); barrier, so no rank
  // goes on (or ends the job) before the checkpoint is whole.
  namespace fs = std::filesystem;
  const auto start = std::chrono::steady_clock::now();
  const std::string name = detail::checkpoint_name(steps_done);
  const std::string tmp = options.checkpoint_dir + "/.tmp-" + name;
  const int rank = comm->rank(), world = comm->world_size();
  if (rank == 0) {
    fs::remove_all(tmp);
    fs::create_directories(tmp);
  }
  comm->barrier();
  detail::CheckpointShardWriter writer(tmp, rank);
  const auto held = sync->optimizer_parameters();
  const auto held_ranges = sync->optimizer_parameter_ranges();
  auto& state = local_optimizer().state();
  size_t index = 0;
  // Replicated tensors are written once: each parameter (with its plain-AdamW state) by the rank
  // with the fewest bytes assigned so far, the same greedy choice on every rank.
  std::vector<int64_t> assigned_bytes(world, 0);
  const bool sharded_params = options.strategy == Strategy::kFsdp && world > 1;
  const auto named = named_unique_parameters(*model);
  for (size_t i = 0; i < named.size(); ++i) {
    const auto& [pname, full] = named[i];
    const bool trainable = full.requires_grad();
    const HeldRange range = trainable ? held_ranges.at(index) : HeldRange{};
    const torch::Tensor* shard = trainable ? &held.at(index++) : nullptr;
    const auto& shape = parameter_shapes.at(i).second;
    const int64_t numel = c10::multiply_integers(shape);
    const int writing_rank = static_cast<int>(
        std::min_element(assigned_bytes.begin(), assigned_bytes.end()) - assigned_bytes.begin());
    assigned_bytes[writing_rank] += numel * ((shard && !sharded) ? 3 : 1);
    const bool my_turn = writing_rank == rank;
    if (sharded_params && shard) {
      writer.add("param/" + pname, shape,
                 shard->detach().reshape(-1).narrow(0, 0, range.end - range.begin), range.begin);
    } else if (my_turn) {
      writer.add("param/" + pname, shape, full, 0);
    }
    if (!shard) continue;
    auto it = state.find(shard->unsafeGetTensorImpl());
    if (it == state.end() || !holds_state_of(*shard)) continue;
    // ZeRO-1 state is written by its owner; fsdp's by every rank (its shard); plain AdamW's once.
    if (!sharded && !sharded_params && !my_turn) continue;
    auto& adam = static_cast<torch::optim::AdamWParamState&>(*it->second);
    for (const auto& [kind, values] :
         {std::pair<std::string, torch::Tensor>{"exp_avg", adam.exp_avg()},
          {"exp_avg_sq", adam.exp_avg_sq()}}) {
      writer.add(kind + "/" + pname, shape,
                 values.reshape(-1).narrow(0, 0, range.end - range.begin), range.begin,
                 adam.step());
    }
  }
  int64_t crash_after = 0;
  if (fault && fault->kind == "crash-during-checkpoint" && steps_done > fault->step) {
    crash_after = 4096;  // part of the file, then the process is gone
  }
  writer.finish(crash_after);
  comm->barrier();
  if (rank == 0) {
    const ModelConfig& c = model->config();
    nlohmann::json header{{"format_version", detail::kCheckpointFormatVersion},
                          {"model",
                           {{"vocab_size", c.vocab_size},
                            {"d_model", c.d_model},
                            {"d_ff", c.d_ff},
                            {"num_layers", c.num_layers},
                            {"num_heads", c.num_heads},
                            {"context_length", options.context_length},
                            {"tie_embeddings", c.tie_embeddings}}},
                          {"strategy", enum_name(options.strategy)},
                          {"shard_optimizer", options.shard_optimizer},
                          {"world_size", world},
                          {"step", steps_done},
                          {"tokens_seen", steps_done * options.batch_size * options.context_length},
                          {"data_position", steps_done * options.batch_size},
                          {"rng", {{"seed", options.seed}}},
                          {"optimizer",
                           {{"kind", "adamw"},
                            {"lr", options.lr},
                            {"beta1", options.beta1},
                            {"beta2", options.beta2},
                            {"eps", options.eps},
                            {"weight_decay", options.weight_decay}}}};
    detail::commit_checkpoint(tmp, options.checkpoint_dir + "/" + name, std::move(header), world,
                              static_cast<int>(options.keep_checkpoints));
  }
  comm->barrier();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string Trainer::Impl::analyze_failure_across_ranks(bool peer_exited) const {
  // This rank's position, with the collective that failed as the one it waits in: the journal
  // counts a failed collective as ended, but it is the one the ranks did not finish together.
  const auto journal = comm->journal().progress();
  RankPosition mine{kPhaseNames[phase.load()], step.load(), journal.last_enqueued,
                    journal.last_completed, std::nullopt};
  const double now_s = comm->now();
  for (const auto& e : comm->journal().entries()) {
    if (e.state != CollectiveState::kCompleted) {
      mine.oldest_pending = to_record(e, now_s);
      break;
    }
  }
  // Long enough for the peers' own timeouts, which follow ours by the gap between the ranks'
  // entries into the collective (a step's spread at most), and short enough that a survivor
  // whose store host is cut off is idle by its timeout + 10 s: 10 s here made that 18 s.
  const auto wait = std::min(comm->timeout(), std::chrono::milliseconds(peer_exited ? 2000 : 5000));
  std::vector<std::optional<std::string>> reports;
  try {
    reports = comm->exchange_failure_reports(position_json(mine).dump(), wait);
  } catch (const std::exception& e) {
    return "cross-rank analysis unavailable: the rendezvous store is unreachable (rank 0, which "
           "serves it, has exited?): " +
           std::string(e.what());
  }
  std::vector<RankReport> ranks;
  for (int r = 0; r < static_cast<int>(reports.size()); ++r) {
    RankReport report{r, std::nullopt};
    if (reports[r]) {
      try {
        report.position = position_from_json(nlohmann::json::parse(*reports[r]));
      } catch (const std::exception&) {
      }  // a malformed report counts as none
    }
    ranks.push_back(std::move(report));
  }
  const double stalled = mine.oldest_pending ? mine.oldest_pending->age_seconds : 0;
  const StallFinding finding =
      analyze_stall(ranks, stalled,
                    "did not report within " + std::to_string(wait.count() / 1000) +
                        " s (stuck outside collectives, or exited)");
  std::fprintf(stderr, "ddpd: rank %d cross-rank analysis: %s\n", comm->rank(),
               finding.message.c_str());
  std::fflush(stderr);
  return "cross-rank analysis: " + finding.message;
}

double Trainer::Impl::evaluate() {
  torch::NoGradGuard no_grad;
  sync->prepare_forward();
  torch::Tensor total = torch::zeros({1}, torch::kFloat32).to(comm->device());
  const int64_t context = options.context_length;
  for (int64_t b = 0; b < options.eval_batches; ++b) {
    // The same held-out batches every time: batches 0 .. B-1 of the eval order.
    const torch::Tensor rows = rows_of(*eval_data, b, 0, local_batch);
    detail::AutocastScope autocast(comm->device(), options.precision == Precision::kBf16);
    total +=
        language_model_loss(model->forward(rows.narrow(1, 0, context)), rows.narrow(1, 1, context))
            .to(torch::kFloat32);
  }
  sync->end_forward_only();
  comm->all_reduce_sum(total, "all_reduce/eval_loss").wait();
  return total.item<double>() / static_cast<double>(options.eval_batches * comm->world_size());
}

StepMetrics Trainer::train_step(int64_t step) {
  Impl& m = *impl_;
  Communicator& comm = *m.comm;
  m.step.store(step, std::memory_order_relaxed);
  m.enter(kForward);
  if (m.hooks.before_step) m.hooks.before_step(step);
  m.inject_at_start(step);
  const bool last = step == m.options.steps - 1;
  const int64_t micro_batches = m.options.grad_accum;
  std::vector<torch::Tensor> micro(micro_batches);  // read before the timed step
  for (int64_t k = 0; k < micro_batches; ++k) {
    micro[k] = m.rows_of(*m.data, step, k * m.micro_batch, m.micro_batch);
  }
  const int64_t context = m.options.context_length;
  comm.take_spans();  // drop spans of collectives outside the timed step

  // Phase boundaries are points on the device's timeline: the host clock on CPU, CUDA events
  // on the compute stream on GPU (read back once the step's work is done).
  detail::Timeline& timeline = comm.timeline();
  timeline.anchor();
  StepMetrics metrics;
  metrics.step = step;
  const auto p0 = timeline.mark();
  m.sync->zero_grad();
  const auto p_zeroed = timeline.mark();
  m.sync->prepare_forward();
  const auto p_gathered = timeline.mark();
  // K micro-batches; only the last backward synchronises (the others only accumulate). Each loss
  // is divided by K so the accumulated gradient is the mean over the rank's rows, as with K = 1.
  torch::Tensor loss_sum = torch::zeros({}, torch::kFloat32).to(comm.device());
  // Marks are read back after the step (on CUDA they are events on the compute stream).
  std::vector<detail::TimePoint> micro_marks{p_gathered};  // forward end, backward end, ...
  for (int64_t k = 0; k < micro_batches; ++k) {
    m.sync->set_sync_on_backward(k == micro_batches - 1);
    m.enter(kForward);
    torch::Tensor loss;
    {
      detail::AutocastScope autocast(comm.device(), m.options.precision == Precision::kBf16);
      loss = language_model_loss(m.model->forward(micro[k].narrow(1, 0, context)),
                                 micro[k].narrow(1, 1, context));
    }
    micro_marks.push_back(timeline.mark());
    m.enter(kBackward);
    (micro_batches > 1 ? loss / static_cast<double>(micro_batches) : loss).backward();
    loss_sum += loss.detach().to(torch::kFloat32);
    micro_marks.push_back(timeline.mark());
  }
  if (m.fault) {
    m.inject_slowness(step, timeline.seconds(timeline.mark()) - timeline.seconds(p_gathered));
    micro_marks.back() = timeline.mark();
  }
  const auto p_backward = micro_marks.back();
  m.enter(kSync);
  metrics.lr = learning_rate_at(m.options, step);
  for (auto& group : m.local_optimizer().param_groups()) {
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(metrics.lr);
  }
  // AdamW per bucket as each bucket's average lands, while later buckets are still on the wire
  // (see optimizer_steps_per_bucket); its time counts as optimizer time, not exposed comm.
  double overlapped_optimizer_s = 0;
  if (m.optimizer_steps_per_bucket) {
    m.sync->finish_gradient_synchronization_in_parts([&](const std::vector<torch::Tensor>& params) {
      const double start = comm.now();
      detail::fused_adamw_step(*m.optimizer, params);
      overlapped_optimizer_s += comm.now() - start;
    });
  } else {
    m.sync->finish_gradient_synchronization();
  }
  const auto p_synced = timeline.mark();
  if (m.hooks.after_gradient_sync) m.hooks.after_gradient_sync(step, *m.sync);
  const double t_synced_host = comm.now();
  if (last) m.memory.before_step = m.measure();
  const auto p_opt_start = timeline.mark();
  const double measure_seconds_host = comm.now() - t_synced_host;
  double broadcast_seconds = 0;
  m.enter(kOptimizer);
  if (m.options.clip_grad_norm > 0) metrics.grad_norm = m.clip_gradients();
  if (m.sharded) {
    m.sharded->step();
    broadcast_seconds = m.sharded->last_broadcast_seconds();
  } else if (!m.optimizer_steps_per_bucket) {
    detail::fused_adamw_step(*m.optimizer);
  }
  m.sync->after_optimizer_step();
  const auto p_end = timeline.mark();
  const double t0 = timeline.seconds(p0), t_zeroed = timeline.seconds(p_zeroed),
               t_gathered = timeline.seconds(p_gathered), t_backward = timeline.seconds(p_backward),
               t_synced = timeline.seconds(p_synced), t_opt_start = timeline.seconds(p_opt_start),
               t_end = timeline.seconds(p_end);
  // Memory accounting is not training; on CUDA it queues no device work, so its host time is
  // the figure to take out (the device timeline may have absorbed it as idle time).
  const double measure_seconds = comm.device().is_cuda()
                                     ? std::min(measure_seconds_host, t_opt_start - t_synced)
                                     : t_opt_start - t_synced;

  metrics.step_seconds = t_end - t0 - measure_seconds;
  std::vector<Phase> phases{{"zero_grad", t0, t_zeroed}, {"gather", t_zeroed, t_gathered}};
  for (size_t i = 0; i + 2 < micro_marks.size(); i += 2) {
    const double begin = timeline.seconds(micro_marks[i]),
                 forwarded = timeline.seconds(micro_marks[i + 1]),
                 end = timeline.seconds(micro_marks[i + 2]);
    metrics.forward_seconds += forwarded - begin;
    metrics.backward_seconds += end - forwarded;
    phases.push_back({"forward", begin, forwarded});
    phases.push_back({"backward", forwarded, end});
  }
  metrics.optimizer_seconds = t_end - t_opt_start + overlapped_optimizer_s;
  auto collectives = comm.take_spans();
  std::vector<Interval> comm_intervals;
  for (const auto& c : collectives) {
    comm_intervals.push_back({c.launch_s, c.complete_s});
    if (c.name.rfind("all_reduce", 0) == 0 || c.name.rfind("reduce_scatter", 0) == 0) {
      metrics.gradient_sync_bytes += c.bytes;
    }
  }
  metrics.comm_seconds = covered_seconds(std::move(comm_intervals), {t0, t_end});
  metrics.exposed_comm_seconds = (t_gathered - t_zeroed) +
                                 (t_synced - t_backward - overlapped_optimizer_s) +
                                 broadcast_seconds;
  metrics.comm_fraction =
      metrics.step_seconds > 0 ? metrics.exposed_comm_seconds / metrics.step_seconds : 0;
  const double global_tokens = static_cast<double>(m.options.batch_size) * m.options.context_length;
  metrics.tokens_per_second = metrics.step_seconds > 0 ? global_tokens / metrics.step_seconds : 0;
  if (last) {
    m.memory.after_step = m.measure();
    const UnshardedPeak peak = m.sync->step_peak_unsharded();
    m.memory.step_peak_unsharded_bytes = peak.total_bytes;
    m.memory.step_peak_unsharded_parameter_bytes = peak.parameter_bytes;
    m.memory.step_peak_unsharded_gradient_bytes = peak.gradient_bytes;
    m.memory.step_peak_full_gradient_units = peak.gradient_units;
  }
  phases.insert(phases.end(), {{"wait", t_backward, t_synced}, {"optimizer", t_opt_start, t_end}});
  record_spans(metrics, comm, collectives, phases);

  // Bookkeeping collectives, outside the timed step.
  m.enter(kMetrics);
  auto rank_loss = (loss_sum / static_cast<double>(micro_batches)).reshape({1}).clone();
  comm.all_reduce_sum(rank_loss, "all_reduce/loss").wait();
  metrics.loss = rank_loss.item<double>() / comm.world_size();
  const int64_t eval_every = m.options.eval_every;
  if (eval_every > 0 && ((step + 1) % eval_every == 0 || last)) metrics.eval_loss = m.evaluate();
  const int64_t every = m.options.spread_every;
  if (every > 0 && ((step + 1) % every == 0 || last)) {
    metrics.param_spread = parameter_spread(*m.sync, comm);
    if (m.options.max_param_spread > 0 && *metrics.param_spread > m.options.max_param_spread) {
      throw std::runtime_error(
          "param spread " + std::to_string(*metrics.param_spread) + " exceeds --max-param-spread " +
          std::to_string(m.options.max_param_spread) + " at step " + std::to_string(step));
    }
  }
  return metrics;
}

TrainingResult Trainer::run(const std::function<void(const StepMetrics&)>& on_step,
                            const std::function<bool()>& cancelled) {
  TrainingResult result;
  impl_->cancelled = cancelled;
  const int64_t every = impl_->options.checkpoint_every;
  for (int64_t step = impl_->start_step; step < impl_->options.steps; ++step) {
    if (cancelled && cancelled()) throw JobCancelled("job cancelled");
    try {
      result.steps.push_back(train_step(step));
      if (every > 0 && (step + 1) % every == 0) {
        impl_->enter(kCheckpoint);
        const double stall = impl_->save_checkpoint(step + 1);
        StepMetrics& metrics = result.steps.back();
        metrics.checkpoint_seconds = stall;
        const double end_s = impl_->comm->now();
        metrics.spans.push_back({"checkpoint", false, impl_->comm->unix_seconds(end_s - stall),
                                 impl_->comm->unix_seconds(end_s)});
      }
    } catch (const CollectiveDesync&) {
      throw;
    } catch (const CollectiveError& e) {
      // An aborted rank was cancelled: its peers are being ended too, and no analysis is owed.
      if (impl_->comm->aborted())
        throw JobCancelled("job cancelled at step " + std::to_string(step) + " (" + e.what() + ")");
      throw CollectiveError(
          std::string(e.what()) + "; " + impl_->analyze_failure_across_ranks(e.peer_exited()),
          e.peer_exited());
    } catch (const c10::Error& e) {
      throw std::runtime_error(one_line(e) + " (step " + std::to_string(step) + ")");
    } catch (const std::bad_alloc&) {
      throw std::runtime_error("out of memory at step " + std::to_string(step) +
                               ": an allocation failed");
    }
    if (on_step) on_step(result.steps.back());
  }
  impl_->enter(kIdle);
  result.synchronization = synchronization();
  result.transport = impl_->comm->transport();
  result.transport_note = impl_->comm->transport_note();
  result.optimizer_sharding = impl_->sharded && impl_->comm->world_size() > 1;
  result.micro_batches = impl_->options.grad_accum;
  result.gradient_wire_dtype = impl_->comm->world_size() == 1 ? "none"
                               : impl_->options.grad_compression == GradCompression::kNone
                                   ? "fp32"
                                   : enum_name(impl_->options.grad_compression);
  result.summary = summarize(result.steps, impl_->options.warmup_steps);
  result.memory = impl_->memory;
  return result;
}

std::vector<torch::Tensor> Trainer::full_parameters() { return impl_->sync->full_parameters(); }

const MemoryProfile& Trainer::memory() const { return impl_->memory; }

std::string Trainer::synchronization() const { return impl_->sync->name(); }

RankPosition Trainer::position() const {
  const TrainerProgress trainer = progress();
  const JournalProgress journal = impl_->comm->journal().progress();
  RankPosition position{trainer.phase, trainer.step, journal.last_enqueued, journal.last_completed,
                        std::nullopt};
  if (journal.oldest_pending) {
    position.oldest_pending = to_record(*journal.oldest_pending, impl_->comm->now());
  }
  return position;
}

TrainerProgress Trainer::progress() const {
  return {kPhaseNames[impl_->phase.load(std::memory_order_relaxed)],
          impl_->step.load(std::memory_order_relaxed)};
}

}  // namespace ddpd
