#include "ddpd/trainer.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <thread>

#include "ddpd/fault_injection.h"

#include "ddpd/grad_sync.h"
#include "ddpd/intervals.h"
#include "ddpd/model.h"
#include "ddpd/sharded_optimizer.h"
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
                  const std::vector<CommSpan>& collectives, std::initializer_list<Phase> phases) {
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
enum PhaseIndex : int { kSetup, kForward, kBackward, kSync, kOptimizer, kMetrics, kIdle };
constexpr const char* kPhaseNames[] = {"setup",     "forward", "backward", "sync",
                                       "optimizer", "metrics", "idle"};

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
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
    if (!fault || step_index != fault->step || fault->kind == "slow") return;
    std::fprintf(stderr, "ddpd: inject %s rank %d step %lld at unix %.3f\n", fault->kind.c_str(),
                 fault->rank, static_cast<long long>(step_index), unix_now());
    std::fflush(stderr);
    if (fault->kind == "exit") std::_Exit(3);
    const auto start = std::chrono::steady_clock::now();
    const auto length = std::chrono::duration<double>(fault->seconds);
    while (fault->seconds <= 0 || std::chrono::steady_clock::now() - start < length) {
      if (cancelled && cancelled()) throw std::runtime_error("job cancelled");
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
  std::shared_ptr<Communicator> comm;
  TransformerLM model{nullptr};
  std::unique_ptr<GradientSynchronizer> sync;
  std::unique_ptr<torch::optim::Optimizer> optimizer;  // unsharded
  std::unique_ptr<ShardedOptimizer> sharded;           // --shard-optimizer
  std::unique_ptr<detail::TokenBatches> data;
  MemoryProfile memory;
  int64_t local_batch = 0;

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

Trainer::Trainer(const DdpJobOptions& options, std::shared_ptr<Communicator> comm,
                 TrainerHooks hooks)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  validate(options, comm->world_size());
  const at::Device device = comm->device();
  if (device.is_cuda() != (options.device == "cuda")) {
    throw OptionError("--device", options.device + " job on a " + device.str() + " communicator");
  }
  if (options.precision == "bf16" && !detail::supports_bf16(device)) {
    throw OptionError("--precision", "bf16 needs a GPU of compute capability 8.0 or later");
  }
  m.options = options;
  m.hooks = std::move(hooks);
  m.fault = parse_fault_injection(options.inject, comm->world_size());
  if (m.fault && m.fault->rank != comm->rank()) m.fault.reset();
  m.comm = std::move(comm);
  const int world = m.comm->world_size();
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  set_compute_threads(options.threads > 0 ? options.threads
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
  SyncOptions sync_options;
  sync_options.strategy = parse_strategy(options.strategy);
  sync_options.bucket_size_mb = options.bucket_size_mb;
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
  m.data = std::make_unique<detail::TokenBatches>(options, m.model->config().vocab_size);
  m.local_batch = options.batch_size / world;
  m.memory.after_init = m.measure();
}

Trainer::~Trainer() = default;

StepMetrics Trainer::train_step(int64_t step) {
  Impl& m = *impl_;
  Communicator& comm = *m.comm;
  m.step.store(step, std::memory_order_relaxed);
  m.enter(kForward);
  if (m.hooks.before_step) m.hooks.before_step(step);
  m.inject_at_start(step);
  const bool last = step == m.options.steps - 1;
  auto batch = m.data->next_global_batch().narrow(0, comm.rank() * m.local_batch, m.local_batch);
  batch = batch.to(comm.device());
  auto inputs = batch.narrow(1, 0, m.options.context_length);
  auto targets = batch.narrow(1, 1, m.options.context_length);
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
  torch::Tensor loss;
  {
    detail::AutocastScope autocast(comm.device(), m.options.precision == "bf16");
    loss = language_model_loss(m.model->forward(inputs), targets);
  }
  const auto p_forward = timeline.mark();
  m.enter(kBackward);
  loss.backward();
  if (m.fault) {
    m.inject_slowness(step, timeline.seconds(timeline.mark()) - timeline.seconds(p_gathered));
  }
  const auto p_backward = timeline.mark();
  m.enter(kSync);
  m.sync->finish_gradient_synchronization();
  const auto p_synced = timeline.mark();
  if (m.hooks.after_gradient_sync) m.hooks.after_gradient_sync(step, *m.sync);
  const double t_synced_host = comm.now();
  if (last) m.memory.before_step = m.measure();
  const auto p_opt_start = timeline.mark();
  const double measure_seconds_host = comm.now() - t_synced_host;
  double broadcast_seconds = 0;
  m.enter(kOptimizer);
  if (m.sharded) {
    m.sharded->step();
    broadcast_seconds = m.sharded->last_broadcast_seconds();
  } else {
    m.optimizer->step();
  }
  m.sync->after_optimizer_step();
  const auto p_end = timeline.mark();
  const double t0 = timeline.seconds(p0), t_zeroed = timeline.seconds(p_zeroed),
               t_gathered = timeline.seconds(p_gathered), t_forward = timeline.seconds(p_forward),
               t_backward = timeline.seconds(p_backward), t_synced = timeline.seconds(p_synced),
               t_opt_start = timeline.seconds(p_opt_start), t_end = timeline.seconds(p_end);
  // Memory accounting is not training; on CUDA it queues no device work, so its host time is
  // the figure to take out (the device timeline may have absorbed it as idle time).
  const double measure_seconds = comm.device().is_cuda()
                                     ? std::min(measure_seconds_host, t_opt_start - t_synced)
                                     : t_opt_start - t_synced;

  metrics.step_seconds = t_end - t0 - measure_seconds;
  metrics.forward_seconds = t_forward - t_gathered;
  metrics.backward_seconds = t_backward - t_forward;
  metrics.optimizer_seconds = t_end - t_opt_start;
  auto collectives = comm.take_spans();
  std::vector<Interval> comm_intervals;
  for (const auto& c : collectives) {
    comm_intervals.push_back({c.launch_s, c.complete_s});
    if (c.name.rfind("all_reduce", 0) == 0 || c.name.rfind("reduce_scatter", 0) == 0) {
      metrics.gradient_sync_bytes += c.bytes;
    }
  }
  metrics.comm_seconds = covered_seconds(std::move(comm_intervals), {t0, t_end});
  metrics.exposed_comm_seconds =
      (t_gathered - t_zeroed) + (t_synced - t_backward) + broadcast_seconds;
  metrics.comm_fraction =
      metrics.step_seconds > 0 ? metrics.exposed_comm_seconds / metrics.step_seconds : 0;
  const double global_tokens = static_cast<double>(m.options.batch_size) * m.options.context_length;
  metrics.tokens_per_second = metrics.step_seconds > 0 ? global_tokens / metrics.step_seconds : 0;
  if (last) m.memory.after_step = m.measure();
  record_spans(metrics, comm, collectives,
               {{"zero_grad", t0, t_zeroed},
                {"gather", t_zeroed, t_gathered},
                {"forward", t_gathered, t_forward},
                {"backward", t_forward, t_backward},
                {"wait", t_backward, t_synced},
                {"optimizer", t_opt_start, t_end}});

  // Bookkeeping collectives, outside the timed step.
  m.enter(kMetrics);
  auto loss_sum = loss.detach().to(torch::kFloat32).reshape({1}).clone();
  comm.all_reduce_sum(loss_sum, "all_reduce/loss").wait();
  metrics.loss = loss_sum.item<double>() / comm.world_size();
  const int64_t every = m.options.spread_every;
  if (every > 0 && ((step + 1) % every == 0 || last)) {
    metrics.param_spread = parameter_spread(m.sync->full_parameters(), comm);
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
  for (int64_t step = 0; step < impl_->options.steps; ++step) {
    if (cancelled && cancelled()) throw std::runtime_error("job cancelled");
    result.steps.push_back(train_step(step));
    if (on_step) on_step(result.steps.back());
  }
  impl_->enter(kIdle);
  result.synchronization = synchronization();
  result.optimizer_sharding = impl_->sharded && impl_->comm->world_size() > 1;
  result.summary = summarize(result.steps, impl_->options.warmup_steps);
  result.memory = impl_->memory;
  return result;
}

std::vector<torch::Tensor> Trainer::full_parameters() { return impl_->sync->full_parameters(); }

const MemoryProfile& Trainer::memory() const { return impl_->memory; }

std::string Trainer::synchronization() const { return impl_->sync->name(); }

TrainerProgress Trainer::progress() const {
  return {kPhaseNames[impl_->phase.load(std::memory_order_relaxed)],
          impl_->step.load(std::memory_order_relaxed)};
}

}  // namespace ddpd
