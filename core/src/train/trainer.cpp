#include "ddpd/core/trainer.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <thread>

#include "ddpd/common/fault_injection.h"
#include "ddpd/core/collective_buffers.h"
#include "ddpd/core/grad_sync.h"
#include "ddpd/core/model.h"
#include "ddpd/kernels/vector_math_warm_up.h"
#include "device/counting_allocator.h"
#include "device/device.h"
#include "heal/healer.h"
#include "train/activation_peak.h"
#include "train/batches.h"
#include "train/checkpointing.h"
#include "train/current_group.h"
#include "train/error_line.h"
#include "train/evaluation.h"
#include "train/failure_analysis.h"
#include "train/fault_injector.h"
#include "train/memory.h"
#include "train/optimizer_stack.h"
#include "train/step_profile.h"
#include "train/step_timing.h"
#include "train/trainer_setup.h"
#include "train/training_checkpoint.h"

namespace ddpd {
namespace {

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

// Where the rank is: written by the training thread, read by any (position(), the analysis).
struct Where {
  std::atomic<int> phase{kSetup};
  std::atomic<int64_t> step{0};
  int64_t start_step = 0;  // steps already done (a resumed checkpoint's, or the joined group's)
};

}  // namespace

// Thread contract: the training thread's, but `where` and `comm` (see their types).
struct Trainer::Impl final : detail::HealTarget {
  // The job. Set by the constructor; read-only after it, but `cancelled` (run()'s, while it runs).
  DdpJobOptions options;
  TrainerHooks hooks;
  std::unique_ptr<detail::FaultInjector> injector;  // --inject, this rank's
  std::function<bool()> cancelled;
  std::atomic<bool> stop_requested{false};  // stop_after_next_checkpoint's; any thread
  Where where;

  // What trains.
  detail::CurrentGroup comm;
  TransformerLM model{nullptr};
  std::unique_ptr<GradientSynchronizer> sync;
  std::unique_ptr<detail::OptimizerStack> optimizers;  // train/optimizer_stack.h
  std::unique_ptr<detail::Healer> healer;              // heal/healer.h
  std::unique_ptr<detail::Batches> batches;            // what it trains on (train/batches.h)
  detail::ParameterShapes parameter_shapes;            // checkpoints' and the export's

  // What it records.
  std::unique_ptr<detail::StepRecorder> recorder;  // what `ddpctl whatif` replays
  MemoryProfile memory;
  detail::ActivationPeak activation_peak;  // memory.step_peak_activation_bytes

  void enter(PhaseIndex p) { where.phase.store(p, std::memory_order_relaxed); }

  // The parts of a step (Trainer::train_step), in order.
  // Forward and backward of each micro-batch, marking the end of each on `timeline`; returns the
  // sum of their losses.
  torch::Tensor forward_backward(const std::vector<torch::Tensor>& micro,
                                 detail::Timeline& timeline, std::vector<detail::TimePoint>& marks);
  // Clipping, the optimizer step; returns ZeRO-1's broadcast seconds.
  double optimizer_step(StepMetrics& metrics);
  void record_last_step_memory();
  // The loss across ranks, held-out loss and param spread: collectives outside the timed step.
  void step_bookkeeping(int64_t step_index, const torch::Tensor& loss_sum, StepMetrics& metrics);
  double evaluate() { return detail::evaluate(options, *model, *sync, *comm, *batches); }

  // Between steps. Saves the checkpoint of `steps_done` steps; returns its seconds (the stall).
  double save_checkpoint(int64_t steps_done) {
    return detail::save_checkpoint(training_state(), steps_done,
                                   injector->checkpoint_crash_bytes(steps_done));
  }
  // Saves the checkpoint after step `step` into its metrics; returns the lowest rank asked to
  // stop there (every rank's answer is the same), or -1.
  int checkpoint_after(int64_t step, StepMetrics& metrics);
  int lowest_rank_asked_to_stop();
  // The cross-rank analysis after a failed collective (train/failure_analysis.h).
  StallFinding analyze_failure_across_ranks(CollectiveFailure cause) const;
  // What run() reports besides the steps and heals: the run's configuration, summary and profile.
  void describe_run(TrainingResult& result) const;
  MemoryBytes measure();

  // What a heal reads and changes (heal/healer.h).
  std::shared_ptr<Communicator> communicator() override { return comm.get(); }
  void adopt_group(std::shared_ptr<Communicator> next) override { comm.set(std::move(next)); }
  detail::TrainingState training_state() override {
    detail::OptimizerStack& o = *optimizers;
    return {options, *comm, *model, *sync, o.local(), o.sharded(), parameter_shapes, o.replica()};
  }
  void go_on_at(int64_t completed_steps, int world) override {
    where.step.store(completed_steps);
    batches->set_world(world);
  }
};

int Trainer::Impl::checkpoint_after(int64_t step, StepMetrics& metrics) {
  enter(kCheckpoint);
  const double stall = save_checkpoint(step + 1);
  metrics.checkpoint_seconds = stall;
  const double end_s = comm->recorder().now();
  metrics.spans.push_back({"checkpoint", false, comm->recorder().unix_seconds(end_s - stall),
                           comm->recorder().unix_seconds(end_s)});
  return lowest_rank_asked_to_stop();
}

// Every checkpoint, whether or not this rank was asked: its peers cannot know (the orphaned
// daemons that ask tell their ranks up to a heartbeat apart; 50 steps of a small model took
// 0.1 s). One int64 on the collectives' device: a few tens of µs on shm, beside a checkpoint's
// milliseconds.
int Trainer::Impl::lowest_rank_asked_to_stop() {
  const CommunicatorInfo& info = comm->info();
  const int64_t mine = stop_requested.load() ? info.rank : info.world_size;
  if (info.world_size == 1) return mine < info.world_size ? static_cast<int>(mine) : -1;
  at::Tensor lowest = at::full({1}, mine, at::TensorOptions().dtype(at::kLong).device(info.device));
  comm->all_reduce(lowest, c10d::ReduceOp::MIN, "all_reduce/stop_after_checkpoint");
  const int64_t agreed = lowest.cpu().item<int64_t>();
  return agreed < info.world_size ? static_cast<int>(agreed) : -1;
}

StallFinding Trainer::Impl::analyze_failure_across_ranks(CollectiveFailure cause) const {
  const RankPosition mine =
      detail::failed_position(*comm, kPhaseNames[where.phase.load()], where.step.load());
  return detail::analyze_failure_across_ranks(*comm, mine, cause);
}

MemoryBytes Trainer::Impl::measure() {
  auto tensors = sync->optimizer_parameters();
  for (auto& p : model->parameters()) tensors.push_back(p);
  auto bytes = detail::measure_memory(tensors, optimizers->state_bytes());
  if (comm->info().device.is_cuda()) {
    bytes.peak_bytes = detail::cuda_allocator_stats(comm->info().device).peak_allocated;
  }
  return bytes;
}

Trainer::Trainer(const DdpJobOptions& options, std::shared_ptr<Communicator> comm,
                 TrainerHooks hooks, int join_generation) try
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  detail::install_counting_cpu_allocator();  // memory.step_peak_tensor_bytes counts from here
  kernels::warm_up_vector_math();  // before any parallel op: kernels/.../vector_math_warm_up.h
  detail::check_job(options, *comm);
  m.options = options;
  m.hooks = std::move(hooks);
  const bool joining = join_generation > 0;
  // The faults were injected into the run this rank joins; they do not fire again.
  m.injector = std::make_unique<detail::FaultInjector>(
      parse_fault_injection(joining ? "" : options.inject, comm->info().world_size),
      comm->info().rank);
  m.healer = std::make_unique<detail::Healer>(m.options, *m.injector, join_generation);
  m.comm.set(std::move(comm));
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const int world = m.comm->info().world_size;
  // --threads is clamped to this host's cores: more only oversubscribes them (kMaxThreadsPerRank).
  detail::set_compute_threads(options.threads > 0
                                  ? std::min(options.threads, static_cast<int>(cores))
                                  : std::max(1, static_cast<int>(cores) / world));
  const std::string resume_from = detail::resume_directory(options, joining);
  std::optional<detail::CheckpointReader> resumed;
  if (!resume_from.empty()) resumed.emplace(resume_from);
  detail::ResidentPeakWindow loading;
  detail::InitialModel built =
      detail::build_model(options, m.hooks, *m.comm, joining, resumed ? &*resumed : nullptr);
  m.model = built.model;
  m.parameter_shapes = std::move(built.parameter_shapes);
  if (options.checkpoint_every > 0) {
    detail::check_checkpoint_dir_writable(options, m.comm->info().rank);
  }
  SyncOptions sync_options = detail::sync_options_of(options);
  sync_options.joins_running_job = joining;
  // Every rank read the same parameters: the import's weights or the checkpoint's.
  sync_options.same_initial_state = resumed || !options.init_from.empty();
  sync_options.source = built.shard_source.get();
  if (resumed) sync_options.launch_order = detail::resumed_launch_order(*resumed);
  m.sync = make_synchronizer(*m.model, m.comm.get(), sync_options);
  built.shard_source.reset();  // unmaps the file
  m.memory.loading_peak_rss_rise_bytes = loading.peak_rise_bytes();
  // Gradients are whole per parameter, and timed on the host clock, for the replicated
  // strategies on CPU only.
  m.recorder = std::make_unique<detail::StepRecorder>(
      *m.model, [impl = &m] { return impl->comm->recorder().now(); },
      options.strategy != Strategy::kFsdp && !m.comm->info().device.is_cuda(),
      static_cast<int>(cores));
  m.optimizers = std::make_unique<detail::OptimizerStack>(m.options, *m.sync, m.comm.get());
  m.batches = std::make_unique<detail::Batches>(m.options, m.model->config().vocab_size, world);
  if (resumed) {
    m.where.start_step = detail::resume_optimizer(*resumed, m.training_state());
    m.where.step.store(m.where.start_step);
  }
  if (m.optimizers->sharded()) m.optimizers->sharded()->set_updated_steps(m.where.start_step);
  m.healer->set_completed_steps(joining ? -1 : m.where.start_step);
  m.memory.after_init = m.measure();
} catch (const c10::Error& e) {
  throw std::runtime_error(detail::error_line(e) +
                           " (building the model, synchroniser and optimizer)");
} catch (const std::bad_alloc&) {
  throw std::runtime_error(
      "out of memory: an allocation failed building the model, synchroniser and optimizer");
}

Trainer::~Trainer() = default;

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
    activation_peak.begin_forward(sync->step_peak_unsharded().parameter_bytes);
    torch::Tensor loss;
    {
      detail::AutocastScope autocast(comm->info().device, options.precision == Precision::kBf16);
      loss = language_model_loss(model->forward(micro[k].narrow(1, 0, context)),
                                 micro[k].narrow(1, 1, context));
    }
    activation_peak.end_forward(sync->step_peak_unsharded().parameter_bytes);
    marks.push_back(timeline.mark());
    enter(kBackward);
    (k_total > 1 ? loss / static_cast<double>(k_total) : loss).backward();
    activation_peak.end_backward();
    loss_sum += loss.detach().to(torch::kFloat32);
    marks.push_back(timeline.mark());
  }
  return loss_sum;
}

double Trainer::Impl::optimizer_step(StepMetrics& metrics) {
  enter(kOptimizer);
  if (options.clip_grad_norm > 0) {
    metrics.grad_norm = optimizers->clip_gradients(options, *sync, *comm);
  }
  const int64_t index = where.step.load();
  const double broadcast_seconds =
      optimizers->step([&] { injector->after_optimizer_update(index); });
  injector->after_optimizer_update(index);  // where the update did not run it already
  healer->set_completed_steps(index + 1);   // before the collectives that may follow
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
  // Since train_step's reset (activation_peak resets the window at each forward, and folds).
  memory.step_peak_tensor_bytes = activation_peak.step_peak_tensor_bytes();
  memory.step_peak_activation_bytes = activation_peak.step_peak_activation_bytes();
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
  m.where.step.store(step, std::memory_order_relaxed);
  detail::reset_cpu_tensor_peak();  // the window of memory.step_peak_tensor_bytes
  m.activation_peak.begin_step();
  m.enter(kForward);
  if (m.hooks.before_step) m.hooks.before_step(step);
  m.injector->at_step_start(step, comm, m.cancelled);
  const bool last = step == m.options.steps - 1;
  const std::vector<torch::Tensor> micro = m.batches->micro_batches(step, comm);  // untimed
  comm.recorder().take_spans();  // drop spans of collectives outside the timed step

  // Phase boundaries are points on the device's timeline: the host clock on CPU, CUDA events on
  // the compute stream on GPU, read back once the step's work is done.
  detail::Timeline& timeline = comm.recorder().timeline();
  timeline.anchor();
  StepMetrics metrics;
  metrics.step = step;
  metrics.first_sample = step * m.options.batch_size + comm.info().rank * m.batches->local_batch();
  metrics.samples = m.batches->local_batch();
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
  m.optimizers->set_learning_rate(metrics.lr);
  detail::StepMarks marks;
  marks.overlapped_optimizer_seconds = m.optimizers->finish_synchronization(*m.sync, comm);
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

void Trainer::Impl::describe_run(TrainingResult& result) const {
  result.synchronization = sync->name();
  result.transport = comm->info().transport;
  result.transport_note = comm->info().transport_note;
  result.shared_buffers_fallback = shared_buffer_fallback(*comm);
  result.optimizer_sharding = optimizers->sharded() && comm->info().world_size > 1;
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
  const bool heals =
      regroup && m.healer->healable(m.optimizers->sharded(), m.comm->info().world_size);
  // A rank's state must be at a step boundary whenever a collective fails (state_transfer.h).
  if (heals) m.optimizers->step_after_synchronization();
  if (m.healer->joining()) m.where.start_step = m.healer->take_state_as_joiner(m, result);
  const int64_t every = m.options.checkpoint_every;
  // --steps 0 (or a resume at the last step): the evaluation of the model as it starts.
  if (m.where.start_step >= m.options.steps && m.batches->has_eval()) {
    result.initial_eval_loss = m.evaluate();
  }
  int asking_rank = -1;  // stop_after_next_checkpoint's, agreed at the last checkpoint
  for (int64_t step = m.where.start_step; step < m.options.steps;) {
    if (cancelled && cancelled()) throw JobCancelled("job cancelled");
    try {
      result.steps.push_back(train_step(step));
      if (every > 0 && (step + 1) % every == 0) {
        asking_rank = m.checkpoint_after(step, result.steps.back());
      }
    } catch (const CollectiveDesync&) {
      throw;
    } catch (const CollectiveError& e) {
      // A rank told to heal was aborted out of its old group's collectives (regroup knows, and
      // returns null on a cancel instead).
      if (heals && !(cancelled && cancelled())) {
        if (const std::optional<int64_t> resumed = m.healer->heal(regroup, e, m, result)) {
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
    if (asking_rank >= 0) throw StoppedAtCheckpoint(step + 1, asking_rank);
    ++step;
  }
  if (!m.options.export_hf.empty()) {
    detail::export_model(m.options, *m.comm, *m.sync, m.model->config(), m.parameter_shapes);
  }
  m.enter(kIdle);
  m.describe_run(result);
  return result;
}

std::vector<torch::Tensor> Trainer::full_parameters() { return impl_->sync->full_parameters(); }

const MemoryProfile& Trainer::memory() const { return impl_->memory; }

std::string Trainer::synchronization() const { return impl_->sync->name(); }

RankPosition Trainer::position() const {
  const TrainerProgress trainer = progress();
  const std::shared_ptr<Communicator> comm = impl_->comm.get();
  const JournalProgress journal = comm->recorder().journal().progress();
  RankPosition position{trainer.phase, trainer.step, journal.last_enqueued, journal.last_completed,
                        std::nullopt};
  if (journal.oldest_pending) {
    position.oldest_pending = detail::to_record(*journal.oldest_pending, comm->recorder().now());
  }
  return position;
}

void Trainer::stop_after_next_checkpoint() { impl_->stop_requested.store(true); }

StoppedAtCheckpoint::StoppedAtCheckpoint(int64_t steps_done, int asking_rank)
    : JobCancelled("stopped after writing the checkpoint of step " + std::to_string(steps_done) +
                   ", as rank " + std::to_string(asking_rank) + " was asked"),
      steps_done_(steps_done),
      asking_rank_(asking_rank) {}

TrainerProgress Trainer::progress() const {
  return {kPhaseNames[impl_->where.phase.load(std::memory_order_relaxed)],
          impl_->where.step.load(std::memory_order_relaxed)};
}

}  // namespace ddpd
