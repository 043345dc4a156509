#include "ddpd/core/trainer.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "ddpd/common/fault_injection.h"
#include "ddpd/common/hf_config.h"
#include "ddpd/common/intervals.h"
#include "ddpd/common/unix_time.h"
#include "ddpd/core/collective_buffers.h"
#include "ddpd/core/grad_sync.h"
#include "ddpd/core/model.h"
#include "ddpd/core/sharded_optimizer.h"
#include "device/device.h"
#include "hf/hf_weights.h"
#include "train/adamw_step.h"
#include "train/checkpoint.h"
#include "train/error_line.h"
#include "train/failure_analysis.h"
#include "train/fault_injector.h"
#include "train/memory.h"
#include "heal/state_transfer.h"
#include "train/step_profile.h"
#include "train/step_timing.h"
#include "train/token_data.h"
#include "train/training_checkpoint.h"

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

// The job against the communicator it runs on: validate() at this world size, and a device and
// precision the communicator's device can run.
void check_job(const DdpJobOptions& options, const Communicator& comm) {
  validate(options, comm.info().world_size);
  const at::Device device = comm.info().device;
  if (device.is_cuda() != (options.device == Device::kCuda)) {
    throw OptionError("--device",
                      enum_name(options.device) + " job on a " + device.str() + " communicator");
  }
  if (options.precision == Precision::kBf16 && !detail::supports_bf16(device)) {
    throw OptionError("--precision", "bf16 needs a GPU of compute capability 8.0 or later");
  }
}

SyncOptions sync_options_of(const DdpJobOptions& options) {
  SyncOptions sync;
  sync.strategy = options.strategy;
  sync.bucket_size_mb = options.bucket_size_mb;
  sync.gradient_wire = wire_dtype_of(options.grad_compression);
  sync.static_buckets = options.static_buckets;
  sync.find_unused_parameters = options.find_unused_parameters;
  sync.fsdp_whole_model = options.fsdp_units == FsdpUnits::kWhole;
  sync.fsdp_prefetch = static_cast<int>(options.fsdp_prefetch);
  sync.reshard_after_forward = options.reshard_after_forward;
  sync.shard_replicas = options.strategy == Strategy::kFsdp && options.shard_replicas > 0;
  return sync;
}

}  // namespace

struct Trainer::Impl {
  // The job. Set by the constructor; read-only after it, but `cancelled` (run()'s, while it runs).
  DdpJobOptions options;
  TrainerHooks hooks;
  std::unique_ptr<detail::FaultInjector> injector;  // --inject, this rank's
  std::function<bool()> cancelled;

  // Where the rank is: written by the training thread, read by any (position(), the analysis).
  std::atomic<int> phase{kSetup};
  std::atomic<int64_t> step{0};
  int64_t start_step = 0;  // steps already done (a resumed checkpoint's)
  // Healing: steps whose optimizer update this rank has applied (-1 while it joins with none),
  // and the group generation it trains in.
  int64_t completed_steps = 0;
  bool joining = false;
  int generation = 0;

  // What trains. The training thread's alone once constructed, but `comm`, which position()
  // reads from any thread: heal() swaps it under comm_swap.
  std::shared_ptr<Communicator> comm;
  mutable std::mutex comm_swap;
  TransformerLM model{nullptr};
  std::unique_ptr<GradientSynchronizer> sync;
  // Unsharded: torch's AdamW holds the options and state; fused_adamw_step updates them.
  std::unique_ptr<torch::optim::AdamW> optimizer;
  std::unique_ptr<ShardedOptimizer> sharded;  // --shard-optimizer
  // fsdp with --shard-replicas 1: the ring predecessor's shards, stepped right after this
  // rank's own with the same gradients' bits, so the copy stays equal to the original.
  std::unique_ptr<torch::optim::AdamW> replica_optimizer;
  // The optimizer steps bucket by bucket inside the gradient synchronisation: bucketed on CPU
  // with more than one rank and without clipping (which needs every gradient's norm first).
  // AdamW is per parameter, so the result is the same as one step after the synchronisation.
  // With ZeRO-1 each bucket's owners step and their broadcasts start at once.
  bool optimizer_steps_per_bucket = false;
  // Checkpoints (train/training_checkpoint.h). The model's unique parameters' names and shapes,
  // taken before the synchroniser exists (fsdp frees the full parameters between steps).
  std::vector<std::pair<std::string, std::vector<int64_t>>> parameter_shapes;
  // fsdp at world > 1 with --init-from or --resume: the file each rank reads its shards from
  // while the synchroniser is built (the model holds no memory until then); null otherwise and
  // afterwards.
  std::unique_ptr<ParameterSource> shard_source;

  // What it trains on. The training thread's.
  std::unique_ptr<detail::TokenSamples> data;
  std::unique_ptr<detail::TokenSamples> eval_data;  // --eval-data
  int64_t local_batch = 0;                          // this rank's rows of each global batch
  int64_t micro_batch = 0;  // rows per forward/backward (local_batch / --grad-accum)

  // What it records. The training thread's.
  std::unique_ptr<detail::StepRecorder> recorder;  // what `ddpctl whatif` replays
  MemoryProfile memory;

  void enter(PhaseIndex p) { phase.store(p, std::memory_order_relaxed); }

  // The constructor's parts, in their order: the model (seeded per rank, on the device), then
  // after the synchroniser the optimizer, then the data.
  // With its initial parameters: random, --init-from's or `resumed`'s (null: none).
  void build_model(TrainerHooks& job_hooks, detail::CheckpointReader* resumed);
  void build_optimizer();
  void build_data();

  // The parts of a step (Trainer::train_step), in order.
  std::vector<torch::Tensor> micro_batches_of(int64_t step_index) const;
  // [rows, context + 1] tokens: this rank's rows [first_row, first_row + rows) of global batch
  // `batch` of `samples`, on the device.
  torch::Tensor rows_of(const detail::TokenSamples& samples, int64_t batch, int64_t first_row,
                        int64_t rows) const;
  // Forward and backward of each micro-batch, marking the end of each on `timeline`; returns the
  // sum of their losses.
  torch::Tensor forward_backward(const std::vector<torch::Tensor>& micro,
                                 detail::Timeline& timeline, std::vector<detail::TimePoint>& marks);
  // Returns the seconds of AdamW run bucket by bucket inside it.
  double finish_synchronization();
  // --clip-grad-norm: the global norm of the synchronised gradients (each rank's fsdp shards
  // summed over ranks by one all-reduce; replicated gradients are whole on every rank, tied
  // parameters appear once), and every gradient scaled by max_norm / (norm + 1e-6) when that is
  // below 1, as torch.nn.utils.clip_grad_norm_ does. Returns the norm before clipping.
  double clip_gradients();
  // Clipping, the optimizer step; returns ZeRO-1's broadcast seconds.
  double optimizer_step(StepMetrics& metrics);
  void record_last_step_memory();
  // The loss across ranks, held-out loss and param spread: collectives outside the timed step.
  void step_bookkeeping(int64_t step_index, const torch::Tensor& loss_sum, StepMetrics& metrics);
  // The mean held-out loss over --eval-batches global batches (the same ones every time),
  // across ranks. A collective.
  double evaluate();

  // Between steps.
  detail::TrainingState training_state();
  // Saves the checkpoint of `steps_done` steps; returns its seconds (the step's stall).
  double save_checkpoint(int64_t steps_done);
  // --export-hf: the full parameters as a Hugging Face model directory. A collective.
  void export_model();
  // The cross-rank analysis after a failed collective (train/failure_analysis.h).
  StallFinding analyze_failure_across_ranks(CollectiveFailure cause) const;
  // Healing (docs/healing.md): whether this run can go on in a new group (a replicated strategy,
  // or sharded state with --shard-replicas 1; more than one rank).
  bool healable() const;
  // The next group generation from `regroup`, and every rank's state from the source
  // (train/state_transfer.h). Returns the step to go on at; nullopt when regroup gave no group.
  // A group of fewer ranks than before (a shrink in place, no spare): throws std::runtime_error
  // where the batch cannot be split over `world` ranks.
  void check_shrink(int world_before, int world) const;
  std::optional<int64_t> heal(const Regroup& regroup, const CollectiveError& failure,
                              TrainingResult& result);
  // The rank that joins: the state of the group it joined.
  void take_state_as_joiner(TrainingResult& result);
  // transfer_training_state over `next`, with --inject exit-during-heal's point; a collective
  // failure is rethrown naming the generation that was healing.
  detail::TransferredState transfer_state(std::shared_ptr<Communicator> next, int64_t steps_done,
                                          const detail::ShrinkFrom& shrink = {});
  // What run() reports besides the steps and heals: the run's configuration, summary and profile.
  void describe_run(TrainingResult& result) const;

  torch::optim::Optimizer& local_optimizer();
  int64_t optimizer_state();
  MemoryBytes measure();
};

// The arithmetic stays on the gradients' device (float64): one read of the norm at the end,
// where copying every gradient to the host made the step wait on each copy.
double Trainer::Impl::clip_gradients() {
  std::vector<torch::Tensor> grads;
  for (auto& p : sync->optimizer_parameters()) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  const auto on_device = torch::TensorOptions().dtype(torch::kDouble).device(comm->info().device);
  torch::Tensor sum_of_squares = torch::zeros({1}, on_device);
  for (const auto& g : grads) sum_of_squares += g.detach().to(torch::kDouble).pow(2).sum();
  if (options.strategy == Strategy::kFsdp && comm->info().world_size > 1) {
    comm->all_reduce_sum(sum_of_squares, "all_reduce/grad_norm").wait();
  }
  const double norm = std::sqrt(sum_of_squares.item<double>());
  const double coefficient = options.clip_grad_norm / (norm + 1e-6);
  if (coefficient < 1) {
    torch::NoGradGuard no_grad;
    for (auto& g : grads) g.mul_(coefficient);
    // The predecessor scales the same bits by the same coefficient.
    for (auto& p : sync->replica_parameters()) {
      if (p.grad().defined()) p.mutable_grad().mul_(coefficient);
    }
  }
  return norm;
}

StallFinding Trainer::Impl::analyze_failure_across_ranks(CollectiveFailure cause) const {
  const RankPosition mine = detail::failed_position(*comm, kPhaseNames[phase.load()], step.load());
  return detail::analyze_failure_across_ranks(*comm, mine, cause);
}

detail::TrainingState Trainer::Impl::training_state() {
  return {options,           *comm,         *model,           *sync,
          local_optimizer(), sharded.get(), parameter_shapes, replica_optimizer.get()};
}

double Trainer::Impl::save_checkpoint(int64_t steps_done) {
  return detail::save_checkpoint(training_state(), steps_done,
                                 injector->checkpoint_crash_bytes(steps_done));
}

torch::optim::Optimizer& Trainer::Impl::local_optimizer() {
  return sharded ? sharded->local_optimizer() : *optimizer;
}

torch::Tensor Trainer::Impl::rows_of(const detail::TokenSamples& samples, int64_t batch,
                                     int64_t first_row, int64_t rows) const {
  return samples
      .samples(batch * options.batch_size + comm->info().rank * local_batch + first_row, rows)
      .to(comm->info().device);
}

int64_t Trainer::Impl::optimizer_state() {
  if (sharded) return optimizer_state_bytes(*sharded);
  return optimizer_state_bytes(*optimizer) +
         (replica_optimizer ? optimizer_state_bytes(*replica_optimizer) : 0);
}

MemoryBytes Trainer::Impl::measure() {
  auto tensors = sync->optimizer_parameters();
  for (auto& p : model->parameters()) tensors.push_back(p);
  auto bytes = detail::measure_memory(tensors, optimizer_state());
  if (comm->info().device.is_cuda()) {
    bytes.peak_bytes = detail::cuda_allocator_stats(comm->info().device).peak_allocated;
  }
  return bytes;
}

void Trainer::Impl::build_model(TrainerHooks& job_hooks, detail::CheckpointReader* resumed) {
  const at::Device device = comm->info().device;
  // Each rank initialises differently; the synchroniser broadcasts rank 0's parameters.
  torch::manual_seed(options.seed + comm->info().rank);
  // The allocator's peak is process-wide; a daemon runs many jobs, so start this job's afresh.
  if (device.is_cuda()) detail::reset_cuda_peak_stats(device);
  ModelConfig model_config = options.resolved_model();
  if (job_hooks.configure_model) job_hooks.configure_model(model_config);
  // fsdp reads each rank's shards of the initial parameters from their file (the import's or the
  // checkpoint's): no rank holds the whole model.
  const bool read_shards = options.strategy == Strategy::kFsdp && comm->info().world_size > 1 &&
                           !joining && (resumed || !options.init_from.empty());
  if (read_shards) {
    model = TransformerLM(model_config, ParameterMemory::kUnallocated, device);
  } else {
    // A joining rank takes every value from a survivor: drawing them first would cost the heal
    // time (0.7 s for the `small` preset's 129 M parameters).
    model = TransformerLM(
        model_config, joining ? ParameterMemory::kUninitialised : ParameterMemory::kInitialised);
    model->to(device);  // before the synchroniser, whose buffers follow the parameters
  }
  if (job_hooks.prepare_model) job_hooks.prepare_model(*model);
  const auto named = named_unique_parameters(*model);
  for (const auto& [name, p] : named) parameter_shapes.emplace_back(name, p.sizes().vec());
  if (resumed && read_shards) {
    detail::check_parameters(*resumed, *model);
    shard_source = std::make_unique<detail::CheckpointParameterSource>(*resumed);
  } else if (resumed) {
    detail::load_parameters(*resumed, *model);  // before the synchroniser shards or broadcasts
  } else if (read_shards) {
    shard_source =
        std::make_unique<detail::HfWeightSource>(options.init_from, model_config, parameter_shapes);
  } else if (!options.init_from.empty()) {
    detail::load_hf_weights(options.init_from, model_config, named);
  }
}

void Trainer::Impl::export_model() {
  // Every rank takes part (fsdp gathers); rank 0 writes.
  const std::vector<torch::Tensor> full = sync->full_parameters();
  if (comm->info().rank != 0) return;
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (size_t i = 0; i < full.size(); ++i)
    named.emplace_back(parameter_shapes.at(i).first, full[i]);
  const nlohmann::json base =
      options.init_from.empty() ? nlohmann::json::object() : read_hf_config(options.init_from);
  detail::save_hf_model(options.export_hf, model->config(), base, named, options.max_shard_bytes);
}

void Trainer::Impl::build_optimizer() {
  auto adamw = torch::optim::AdamWOptions(options.lr)
                   .betas({options.beta1, options.beta2})
                   .eps(options.eps)
                   .weight_decay(options.weight_decay);
  if (options.shard_optimizer) {
    std::vector<torch::optim::OptimizerParamGroup> groups{
        torch::optim::OptimizerParamGroup(sync->optimizer_parameters())};
    sharded = std::make_unique<ShardedOptimizer>(std::move(groups), adamw_factory(adamw), comm,
                                                 options.shard_replicas);
  } else {
    optimizer = std::make_unique<torch::optim::AdamW>(sync->optimizer_parameters(), adamw);
    const std::vector<torch::Tensor> replica = sync->replica_parameters();
    if (!replica.empty()) replica_optimizer = std::make_unique<torch::optim::AdamW>(replica, adamw);
  }
  optimizer_steps_per_bucket = options.strategy == Strategy::kBucketed &&
                               comm->info().world_size > 1 && options.clip_grad_norm == 0 &&
                               !comm->info().device.is_cuda();
}

void Trainer::Impl::build_data() {
  const int64_t vocab = model->config().vocab_size;
  data = std::make_unique<detail::TokenSamples>(detail::training_source(options),
                                                options.context_length, vocab, options.seed + 1);
  if (!options.eval_data.empty()) {
    eval_data = std::make_unique<detail::TokenSamples>(
        detail::eval_source(options), options.context_length, vocab, options.seed + 2);
  }
  local_batch = options.batch_size / comm->info().world_size;
  micro_batch = local_batch / options.grad_accum;
}

Trainer::Trainer(const DdpJobOptions& options, std::shared_ptr<Communicator> comm,
                 TrainerHooks hooks, int join_generation) try
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  check_job(options, *comm);
  m.options = options;
  m.hooks = std::move(hooks);
  m.joining = join_generation > 0;
  m.generation = join_generation;
  // The faults were injected into the run this rank joins; they do not fire again.
  m.injector = std::make_unique<detail::FaultInjector>(
      parse_fault_injection(m.joining ? "" : options.inject, comm->info().world_size),
      comm->info().rank);
  m.comm = std::move(comm);
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const int world = m.comm->info().world_size;
  // --threads is clamped to this host's cores: more only oversubscribes them (kMaxThreadsPerRank).
  set_compute_threads(options.threads > 0 ? std::min(options.threads, static_cast<int>(cores))
                                          : std::max(1, static_cast<int>(cores) / world));
  const std::string resume_from =
      options.resume.empty() || m.joining
          ? ""
          : detail::resolve_resume(options.resume, options.checkpoint_dir);
  std::optional<detail::CheckpointReader> resumed;
  if (!resume_from.empty()) resumed.emplace(resume_from);
  detail::ResidentPeakWindow loading;
  m.build_model(m.hooks, resumed ? &*resumed : nullptr);
  if (options.checkpoint_every > 0) {
    detail::check_checkpoint_dir_writable(options, m.comm->info().rank);
  }
  SyncOptions sync_options = sync_options_of(options);
  sync_options.joins_running_job = m.joining;
  // Every rank read the same parameters: the import's weights or the checkpoint's.
  sync_options.same_initial_state = resumed || !options.init_from.empty();
  sync_options.source = m.shard_source.get();
  if (resumed) sync_options.launch_order = detail::resumed_launch_order(*resumed);
  m.sync = make_synchronizer(*m.model, m.comm, sync_options);
  m.shard_source.reset();  // unmaps the file
  m.memory.loading_peak_rss_rise_bytes = loading.peak_rise_bytes();
  // Gradients are whole per parameter, and timed on the host clock, for the replicated
  // strategies on CPU only.
  m.recorder = std::make_unique<detail::StepRecorder>(
      *m.model, [impl = &m] { return impl->comm->recorder().now(); },
      options.strategy != Strategy::kFsdp && !m.comm->info().device.is_cuda(),
      static_cast<int>(cores));
  m.build_optimizer();
  m.build_data();
  if (resumed) {
    detail::load_optimizer_state(*resumed, m.training_state());
    m.start_step = detail::resumed_step(*resumed, options);
    m.step.store(m.start_step);
  }
  if (m.sharded) m.sharded->set_updated_steps(m.start_step);
  m.completed_steps = m.joining ? -1 : m.start_step;
  m.memory.after_init = m.measure();
} catch (const c10::Error& e) {
  throw std::runtime_error(detail::error_line(e) +
                           " (building the model, synchroniser and optimizer)");
} catch (const std::bad_alloc&) {
  throw std::runtime_error(
      "out of memory: an allocation failed building the model, synchroniser and optimizer");
}

Trainer::~Trainer() = default;

double Trainer::Impl::evaluate() {
  torch::NoGradGuard no_grad;
  sync->prepare_forward();
  // Summed in float64: the float64 verification runs compare eval_loss with transformers'.
  torch::Tensor total = torch::zeros({1}, torch::kFloat64).to(comm->info().device);
  const int64_t context = options.context_length;
  for (int64_t b = 0; b < options.eval_batches; ++b) {
    // The same held-out batches every time: batches 0 .. B-1 of the eval order.
    const torch::Tensor rows = rows_of(*eval_data, b, 0, local_batch);
    detail::AutocastScope autocast(comm->info().device, options.precision == Precision::kBf16);
    total +=
        language_model_loss(model->forward(rows.narrow(1, 0, context)), rows.narrow(1, 1, context))
            .to(torch::kFloat64);
  }
  sync->end_forward_only();
  comm->all_reduce_sum(total, "all_reduce/eval_loss").wait();
  return total.item<double>() / static_cast<double>(options.eval_batches * comm->info().world_size);
}

std::vector<torch::Tensor> Trainer::Impl::micro_batches_of(int64_t step_index) const {
  std::vector<torch::Tensor> micro(options.grad_accum);
  for (int64_t k = 0; k < options.grad_accum; ++k) {
    micro[k] = rows_of(*data, step_index, k * micro_batch, micro_batch);
  }
  return micro;
}

torch::Tensor Trainer::Impl::forward_backward(const std::vector<torch::Tensor>& micro,
                                              detail::Timeline& timeline,
                                              std::vector<detail::TimePoint>& marks) {
  // K micro-batches; only the last backward synchronises (the others only accumulate). Each loss
  // is divided by K so the accumulated gradient is the mean over the rank's rows, as with K = 1.
  const int64_t k_total = static_cast<int64_t>(micro.size());
  const int64_t context = options.context_length;
  torch::Tensor loss_sum = torch::zeros({}, torch::kFloat32).to(comm->info().device);
  for (int64_t k = 0; k < k_total; ++k) {
    sync->set_sync_on_backward(k == k_total - 1);
    enter(kForward);
    torch::Tensor loss;
    {
      detail::AutocastScope autocast(comm->info().device, options.precision == Precision::kBf16);
      loss = language_model_loss(model->forward(micro[k].narrow(1, 0, context)),
                                 micro[k].narrow(1, 1, context));
    }
    marks.push_back(timeline.mark());
    enter(kBackward);
    (k_total > 1 ? loss / static_cast<double>(k_total) : loss).backward();
    loss_sum += loss.detach().to(torch::kFloat32);
    marks.push_back(timeline.mark());
  }
  return loss_sum;
}

double Trainer::Impl::finish_synchronization() {
  // AdamW per bucket as each bucket's average lands, while later buckets are still on the wire
  // (see optimizer_steps_per_bucket); its time counts as optimizer time, not exposed comm.
  double overlapped_optimizer_s = 0;
  if (optimizer_steps_per_bucket) {
    sync->finish_gradient_synchronization_in_parts([&](const std::vector<torch::Tensor>& params) {
      const double start = comm->recorder().now();
      if (sharded) {
        sharded->step_part(params);  // ZeRO-1: the owners step, their broadcasts start
      } else {
        detail::fused_adamw_step(*optimizer, params);
      }
      overlapped_optimizer_s += comm->recorder().now() - start;
    });
  } else {
    sync->finish_gradient_synchronization();
  }
  return overlapped_optimizer_s;
}

double Trainer::Impl::optimizer_step(StepMetrics& metrics) {
  enter(kOptimizer);
  if (options.clip_grad_norm > 0) metrics.grad_norm = clip_gradients();
  double broadcast_seconds = 0;
  const int64_t index = step.load();
  if (sharded) {
    if (optimizer_steps_per_bucket) {
      sharded->finish_step();
    } else {
      sharded->step([&] { injector->after_optimizer_update(index); });
    }
    broadcast_seconds = sharded->last_broadcast_seconds();
  } else if (!optimizer_steps_per_bucket) {
    detail::fused_adamw_step(*optimizer);
    if (replica_optimizer) detail::fused_adamw_step(*replica_optimizer);
  }
  injector->after_optimizer_update(index);  // where the update did not run it already
  completed_steps = step.load() + 1;        // before the collectives that may follow
  sync->after_optimizer_step();
  return broadcast_seconds;
}

void Trainer::Impl::record_last_step_memory() {
  memory.after_step = measure();
  const UnshardedPeak peak = sync->step_peak_unsharded();
  memory.step_peak_unsharded_bytes = peak.total_bytes;
  memory.step_peak_unsharded_parameter_bytes = peak.parameter_bytes;
  memory.step_peak_unsharded_gradient_bytes = peak.gradient_bytes;
  memory.step_peak_full_gradient_units = peak.gradient_units;
}

void Trainer::Impl::step_bookkeeping(int64_t step_index, const torch::Tensor& loss_sum,
                                     StepMetrics& metrics) {
  enter(kMetrics);
  const bool last = step_index == options.steps - 1;
  auto rank_loss = (loss_sum / static_cast<double>(options.grad_accum)).reshape({1}).clone();
  comm->all_reduce_sum(rank_loss, "all_reduce/loss").wait();
  metrics.loss = rank_loss.item<double>() / comm->info().world_size;
  const int64_t eval_every = options.eval_every;
  if (eval_every > 0 && ((step_index + 1) % eval_every == 0 || last))
    metrics.eval_loss = evaluate();
  const int64_t every = options.spread_every;
  if (every > 0 && ((step_index + 1) % every == 0 || last)) {
    metrics.param_spread = parameter_spread(*sync, *comm);
    if (options.max_param_spread > 0 && *metrics.param_spread > options.max_param_spread) {
      throw std::runtime_error(
          "param spread " + std::to_string(*metrics.param_spread) + " exceeds --max-param-spread " +
          std::to_string(options.max_param_spread) + " at step " + std::to_string(step_index));
    }
  }
}

StepMetrics Trainer::train_step(int64_t step) {
  Impl& m = *impl_;
  Communicator& comm = *m.comm;
  m.step.store(step, std::memory_order_relaxed);
  m.enter(kForward);
  if (m.hooks.before_step) m.hooks.before_step(step);
  m.injector->at_step_start(step, comm, m.cancelled);
  const bool last = step == m.options.steps - 1;
  const std::vector<torch::Tensor> micro = m.micro_batches_of(step);  // before the timed step
  comm.recorder().take_spans();  // drop spans of collectives outside the timed step

  // Phase boundaries are points on the device's timeline: the host clock on CPU, CUDA events on
  // the compute stream on GPU, read back once the step's work is done.
  detail::Timeline& timeline = comm.recorder().timeline();
  timeline.anchor();
  StepMetrics metrics;
  metrics.step = step;
  metrics.first_sample = step * m.options.batch_size + comm.info().rank * m.local_batch;
  metrics.samples = m.local_batch;
  const auto p_start = timeline.mark();
  m.sync->zero_grad();
  const auto p_zeroed = timeline.mark();
  m.sync->prepare_forward();
  std::vector<detail::TimePoint> micro_marks{timeline.mark()};  // gathered, forward end, ...
  const torch::Tensor loss_sum = m.forward_backward(micro, timeline, micro_marks);
  if (m.injector->armed()) {
    const double compute = timeline.seconds(timeline.mark()) - timeline.seconds(micro_marks[0]);
    m.injector->stretch_compute(step, compute);
    micro_marks.back() = timeline.mark();
  }
  m.enter(kSync);
  metrics.lr = learning_rate_at(m.options, step);
  for (auto& group : m.local_optimizer().param_groups()) {
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(metrics.lr);
  }
  if (m.replica_optimizer) {
    for (auto& group : m.replica_optimizer->param_groups()) {
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(metrics.lr);
    }
  }
  detail::StepMarks marks;
  marks.overlapped_optimizer_seconds = m.finish_synchronization();
  const auto p_synced = timeline.mark();
  if (m.hooks.after_gradient_sync) m.hooks.after_gradient_sync(step, *m.sync);
  const double t_synced_host = comm.recorder().now();
  if (last) m.memory.before_step = m.measure();
  const auto p_optimizer = timeline.mark();
  const double measure_seconds_host = comm.recorder().now() - t_synced_host;
  marks.broadcast_seconds = m.optimizer_step(metrics);
  const auto p_end = timeline.mark();

  marks.start = timeline.seconds(p_start);
  marks.zeroed = timeline.seconds(p_zeroed);
  marks.gathered = timeline.seconds(micro_marks[0]);
  for (const auto& mark : micro_marks) marks.micro_marks.push_back(timeline.seconds(mark));
  marks.synced = timeline.seconds(p_synced);
  marks.optimizer_start = timeline.seconds(p_optimizer);
  marks.end = timeline.seconds(p_end);
  // Memory accounting is not training; on CUDA it queues no device work, so its host time is the
  // figure to take out (the device timeline may have absorbed it as idle time).
  marks.measure_seconds = comm.info().device.is_cuda()
                              ? std::min(measure_seconds_host, marks.optimizer_start - marks.synced)
                              : marks.optimizer_start - marks.synced;
  const auto collectives = comm.recorder().take_spans();
  const detail::StepTiming timing = detail::step_timing(marks, collectives);
  m.recorder->record(step, marks, timing, collectives);
  detail::apply_step_timing(
      timing, collectives, static_cast<double>(m.options.batch_size) * m.options.context_length,
      [&comm](double s) { return comm.recorder().unix_seconds(s); }, metrics);
  if (last) m.record_last_step_memory();
  m.step_bookkeeping(step, loss_sum, metrics);  // collectives outside the timed step
  return metrics;
}

bool Trainer::Impl::healable() const {
  // Sharded state (ZeRO-1's optimizer shards, fsdp's shards) heals from its replicas
  // (--shard-replicas 1).
  const bool shards_state = sharded || options.strategy == Strategy::kFsdp;
  return (!shards_state || options.shard_replicas > 0) && comm->info().world_size > 1;
}

std::optional<int64_t> Trainer::Impl::heal(const Regroup& regroup, const CollectiveError& failure,
                                           TrainingResult& result) {
  const auto start = std::chrono::steady_clock::now();
  const int world_before = comm->info().world_size;
  GroupGeneration group = regroup(generation + 1, failure, *comm);
  std::shared_ptr<Communicator> next = std::move(group.comm);
  if (!next) return std::nullopt;
  const double regroup_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int world = next->info().world_size;
  // Every survivor checks the same facts, so all refuse together, before any collective.
  if (world != world_before) check_shrink(world_before, world);
  ++generation;
  {
    std::lock_guard<std::mutex> lock(comm_swap);
    comm = next;  // the old group was aborted by connect_generation; its Communicator ends here
  }
  const detail::ShrinkFrom shrink =
      world == world_before
          ? detail::ShrinkFrom{}
          : detail::ShrinkFrom{world_before,
                               group.lost_rank >= 0 ? group.lost_rank : failure.peer_rank()};
  const detail::TransferredState moved = transfer_state(std::move(next), completed_steps, shrink);
  completed_steps = moved.completed_steps;
  step.store(moved.completed_steps);
  // The same global batch in fewer, larger shares: the global sample order is the world's
  // (docs/data.md), so no sample is skipped or read twice.
  local_batch = options.batch_size / world;
  micro_batch = local_batch / options.grad_accum;
  // A step this rank reported that the source had not completed is trained again.
  while (!result.steps.empty() && result.steps.back().step >= moved.completed_steps) {
    result.steps.pop_back();
  }
  // The rank that joined has the lost rank's number; the regroup names it where it knows, the
  // failure only when the transport saw it leave.
  const int lost = moved.joined_rank >= 0 ? moved.joined_rank
                   : group.lost_rank >= 0 ? group.lost_rank
                                          : failure.peer_rank();
  result.heals.push_back({generation, lost, moved.source_rank, moved.completed_steps, moved.bytes,
                          regroup_seconds, moved.seconds, world});
  std::fprintf(stderr,
               "ddpd: healed into generation %d (rank %d lost): state of rank %d, %lld bytes in "
               "%.3f s, after %.3f s to regroup; going on at step %lld with %d ranks\n",
               generation, lost, moved.source_rank, static_cast<long long>(moved.bytes),
               moved.seconds, regroup_seconds, static_cast<long long>(moved.completed_steps),
               world);
  return moved.completed_steps;
}

void Trainer::Impl::check_shrink(int world_before, int world) const {
  const std::string what = "healing: shrinking in place from " + std::to_string(world_before) +
                           " to " + std::to_string(world) + " ranks: ";
  if (options.batch_size % (static_cast<int64_t>(world) * options.grad_accum) != 0) {
    throw std::runtime_error(what + "--batch " + std::to_string(options.batch_size) +
                             " does not split into " + std::to_string(world) + " ranks x " +
                             "--grad-accum " + std::to_string(options.grad_accum));
  }
}

detail::TransferredState Trainer::Impl::transfer_state(std::shared_ptr<Communicator> next,
                                                       int64_t steps_done,
                                                       const detail::ShrinkFrom& shrink) {
  // A rank of the new group lost while the state moves fails the heal: no second heal is tried
  // (the coordinator restarts the job from its checkpoint), so every rank fails, naming it.
  try {
    return detail::transfer_training_state(
        training_state(), std::move(next), steps_done,
        [this](int64_t resumed_step) { injector->during_state_transfer(resumed_step); }, shrink);
  } catch (const CollectiveError& e) {
    throw CollectiveError("healing into group generation " + std::to_string(generation) +
                              ": the state transfer failed: " + e.what(),
                          e.cause(), e.peer_rank());
  }
}

void Trainer::Impl::take_state_as_joiner(TrainingResult& result) {
  const detail::TransferredState moved = transfer_state(comm, /*steps_done=*/-1);
  completed_steps = start_step = moved.completed_steps;
  step.store(moved.completed_steps);
  joining = false;
  result.heals.push_back({generation, comm->info().rank, moved.source_rank, moved.completed_steps,
                          moved.bytes, 0.0, moved.seconds, comm->info().world_size});
}

void Trainer::Impl::describe_run(TrainingResult& result) const {
  result.synchronization = sync->name();
  result.transport = comm->info().transport;
  result.transport_note = comm->info().transport_note;
  result.shared_buffers_fallback = shared_buffer_fallback(*comm);
  result.optimizer_sharding = sharded && comm->info().world_size > 1;
  result.micro_batches = options.grad_accum;
  result.gradient_wire_dtype = comm->info().world_size == 1 ? "none"
                               : options.grad_compression == GradCompression::kNone
                                   ? "fp32"
                                   : enum_name(options.grad_compression);
  result.summary = summarize(result.steps, options.warmup_steps);
  result.memory = memory;
  result.profile = recorder->profile();
}

TrainingResult Trainer::run(const std::function<void(const StepMetrics&)>& on_step,
                            const std::function<bool()>& cancelled, const Regroup& regroup) {
  Impl& m = *impl_;
  TrainingResult result;
  m.cancelled = cancelled;
  const bool heals = regroup && m.healable();
  // A rank's state must be at a step boundary whenever a collective fails (state_transfer.h).
  if (heals) m.optimizer_steps_per_bucket = false;
  if (m.joining) m.take_state_as_joiner(result);
  const int64_t every = m.options.checkpoint_every;
  // --steps 0 (or a resume at the last step): the evaluation of the model as it starts.
  if (m.start_step >= m.options.steps && m.eval_data) result.initial_eval_loss = m.evaluate();
  for (int64_t step = m.start_step; step < m.options.steps;) {
    if (cancelled && cancelled()) throw JobCancelled("job cancelled");
    try {
      result.steps.push_back(train_step(step));
      if (every > 0 && (step + 1) % every == 0) {
        m.enter(kCheckpoint);
        const double stall = m.save_checkpoint(step + 1);
        StepMetrics& metrics = result.steps.back();
        metrics.checkpoint_seconds = stall;
        const double end_s = m.comm->recorder().now();
        metrics.spans.push_back({"checkpoint", false,
                                 m.comm->recorder().unix_seconds(end_s - stall),
                                 m.comm->recorder().unix_seconds(end_s)});
      }
    } catch (const CollectiveDesync&) {
      throw;
    } catch (const CollectiveError& e) {
      // A rank told to heal was aborted out of its old group's collectives (regroup knows, and
      // returns null on a cancel instead).
      if (heals && !(cancelled && cancelled())) {
        if (const std::optional<int64_t> resumed = m.heal(regroup, e, result)) {
          step = *resumed;
          continue;
        }
      }
      // An aborted rank was cancelled: its peers are being ended too, and no analysis is owed.
      if (m.comm->aborted() || (cancelled && cancelled()))
        throw JobCancelled("job cancelled at step " + std::to_string(step) + " (" + e.what() + ")");
      // The rank to name: the peer the transport saw end, else the one the analysis found.
      const StallFinding finding = m.analyze_failure_across_ranks(e.cause());
      const bool transport_named = peer_ended(e.cause()) && e.peer_rank() >= 0;
      throw CollectiveError(std::string(e.what()) + "; " + finding.message, e.cause(),
                            transport_named ? e.peer_rank() : finding.rank);
    } catch (const c10::Error& e) {
      throw std::runtime_error(detail::error_line(e) + " (step " + std::to_string(step) + ")");
    } catch (const std::bad_alloc&) {
      throw std::runtime_error("out of memory at step " + std::to_string(step) +
                               ": an allocation failed");
    }
    if (on_step) on_step(result.steps.back());
    ++step;
  }
  if (!m.options.export_hf.empty()) m.export_model();
  m.enter(kIdle);
  m.describe_run(result);
  return result;
}

std::vector<torch::Tensor> Trainer::full_parameters() { return impl_->sync->full_parameters(); }

const MemoryProfile& Trainer::memory() const { return impl_->memory; }

std::string Trainer::synchronization() const { return impl_->sync->name(); }

RankPosition Trainer::position() const {
  const TrainerProgress trainer = progress();
  std::shared_ptr<Communicator> comm;
  {
    std::lock_guard<std::mutex> lock(impl_->comm_swap);
    comm = impl_->comm;
  }
  const JournalProgress journal = comm->recorder().journal().progress();
  RankPosition position{trainer.phase, trainer.step, journal.last_enqueued, journal.last_completed,
                        std::nullopt};
  if (journal.oldest_pending) {
    position.oldest_pending = detail::to_record(*journal.oldest_pending, comm->recorder().now());
  }
  return position;
}

TrainerProgress Trainer::progress() const {
  return {kPhaseNames[impl_->phase.load(std::memory_order_relaxed)],
          impl_->step.load(std::memory_order_relaxed)};
}

}  // namespace ddpd
