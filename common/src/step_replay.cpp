// The replay itself (step_replay.h, steps 1 and 3-5).
#include "ddpd/common/step_replay.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "ddpd/common/intervals.h"
#include "ddpd/common/median.h"
#include "ddpd/common/overlap_model.h"
#include "ddpd/common/shard_owners.h"
#include "step_replay_internal.h"

namespace ddpd {
namespace {

// The comm fraction and tokens/s of figures whose times are set.
void derive_rates(StepFigures& f) {
  const double tokens =
      static_cast<double>(f.options.batch_size) * static_cast<double>(f.options.context_length);
  f.comm_fraction = f.step_s > 0 ? f.exposed_comm_s / f.step_s : 0;
  f.tokens_per_s = f.step_s > 0 ? tokens / f.step_s : 0;
}

// Step 1: the measured step, as medians over the profiled steps after warm-up.
struct Base {
  double zero_grad_s = 0, forward_s = 0, backward_s = 0, last_backward_s = 0;
  double sync_tail_s = 0;        // last backward's end to the synchronisation's end
  double optimizer_after_s = 0;  // optimizer time after the synchronisation
  double optimizer_full_s = 0;   // AdamW over every parameter, on one rank
  double residual_s = 0;         // the step less the phases above
  double step_s = 0;
  std::vector<double> ready_fraction;  // of the last backward, by gradient; 1 when never ready
  std::vector<int64_t> bytes;          // by gradient
};

std::vector<const ProfiledStep*> measured_steps(const MeasuredJob& job) {
  std::vector<const ProfiledStep*> steps;
  for (const auto& s : job.result.profile.steps) {
    if (s.step >= job.options.warmup_steps) steps.push_back(&s);
  }
  if (steps.empty()) {
    for (const auto& s : job.result.profile.steps) steps.push_back(&s);
  }
  return steps;
}

// Rank 0's share of ZeRO-1's parameter bytes: ShardedOptimizer's balance (shard_owners.h).
double rank0_owned_fraction(const std::vector<int64_t>& bytes, int world) {
  if (world <= 1) return 1.0;
  std::vector<int64_t> owned(world, 0);
  assign_shard_owners(bytes, owned);
  const int64_t total = std::accumulate(bytes.begin(), bytes.end(), int64_t{0});
  return total > 0 ? static_cast<double>(owned[0]) / static_cast<double>(total) : 1.0;
}

double broadcast_service_s(const ProfiledStep& step) {
  double total = 0;
  for (const auto& c : step.collectives) {
    if (c.op == Collective::kBroadcast) total += c.complete_s - c.launch_s;
  }
  return total;
}

Base base_of(const MeasuredJob& job) {
  const StepProfile& profile = job.result.profile;
  const auto steps = measured_steps(job);
  Base b;
  for (const auto& g : profile.gradients) b.bytes.push_back(g.bytes);
  std::vector<double> zero, fwd, bwd, last, tail, after, full, step;
  std::vector<std::vector<double>> fractions(profile.gradients.size());
  const bool sharded = job.result.optimizer_sharding;
  const double own = sharded ? rank0_owned_fraction(b.bytes, job.world_size) : 1.0;
  for (const ProfiledStep* s : steps) {
    zero.push_back(s->zero_grad_s);
    fwd.push_back(s->forward_s);
    bwd.push_back(s->backward_s);
    const double last_backward = s->last_backward_end_s - s->last_backward_start_s;
    last.push_back(last_backward);
    tail.push_back(s->synced_s - s->last_backward_end_s);
    after.push_back(s->optimizer_s - s->overlapped_optimizer_s);
    // ZeRO-1 steps only its share; its broadcasts are not AdamW.
    const double compute = sharded && s->overlapped_optimizer_s > 0
                               ? s->overlapped_optimizer_s
                               : s->optimizer_s - (sharded ? broadcast_service_s(*s) : 0.0);
    full.push_back(std::max(0.0, compute) / own);
    step.push_back(s->step_s);
    for (size_t i = 0; i < fractions.size() && i < s->ready_s.size(); ++i) {
      const double ready = s->ready_s[i];
      fractions[i].push_back(
          ready < 0 || last_backward <= 0 ? 1.0 : std::min(1.0, ready / last_backward));
    }
  }
  b.zero_grad_s = median(zero);
  b.forward_s = median(fwd);
  b.backward_s = median(bwd);
  b.last_backward_s = median(last);
  b.sync_tail_s = median(tail);
  b.optimizer_after_s = median(after);
  b.optimizer_full_s = median(full);
  b.step_s = median(step);
  b.residual_s = std::max(0.0, b.step_s - b.zero_grad_s - b.forward_s - b.backward_s -
                                   b.sync_tail_s - b.optimizer_after_s);
  for (auto& f : fractions) b.ready_fraction.push_back(f.empty() ? 1.0 : median(f));
  return b;
}

// Step 3: seconds of compute per rank at world `n`, relative to the measured world.
double compute_scale(const MeasuredJob& job, int n, int host_cores) {
  const int cores = std::max(1, host_cores);
  auto threads = [&](int world) {
    return job.options.threads > 0 ? std::min(job.options.threads, cores)
                                   : std::max(1, cores / world);
  };
  // Work per rank over the speed it gets: its local batch, over its threads, stretched when the
  // ranks' threads oversubscribe the cores.
  auto per_rank = [&](int world) {
    const double local = static_cast<double>(job.options.batch_size) / world;
    const double share = std::max(1.0, static_cast<double>(world * threads(world)) / cores);
    return local * share / threads(world);
  };
  return per_rank(n) / per_rank(job.world_size);
}

LinkModel scaled_link(LinkModel link, int n) {
  if (link.world_size == n || link.world_size <= 1 || n <= 1) return link;
  const double ring_bytes = [](int w) { return 2.0 * (w - 1) / w; }(n) /
                            (2.0 * (link.world_size - 1) / link.world_size);
  link.seconds_per_byte *= ring_bytes;
  link.alpha_s *= static_cast<double>(n - 1) / (link.world_size - 1);
  link.world_size = n;
  return link;
}

// The link model's cost of a collective at full speed: alpha plus the bytes at its rate.
CollectiveCost link_cost(const LinkModel& link) {
  return [link](double bytes) { return link.alpha_s + bytes * link.seconds_per_byte; };
}

// The job being predicted; every field is set from its options (replay_steps).
struct Target {
  Strategy strategy = kJobDefaults.strategy;
  double bucket_mb = kJobDefaults.bucket_size_mb;
  int world = 1;
  bool sharded = false;
  bool optimizer_per_bucket = false;
  double wire = 1.0;  // wire bytes per gradient byte (0.5 under fp16/bf16 compression)
  double own = 1.0;   // rank 0's share of ZeRO-1's parameters (1 without ZeRO-1)
};

// Step 4 from the end of the last backward: when the synchronisation is done and what of the
// optimizer ran inside it (times from the last backward's start).
struct SyncReplay {
  double end_s = 0;
  double overlapped_optimizer_s = 0;
  double optimizer_after_s = 0;  // after the synchronisation, ZeRO-1's broadcast wait included
  double broadcast_wait_s = 0;
  double comm_s = 0;
};

// When each all-reduce launches, with its bytes, in launch order (overlap: each gradient in
// ready order; bucketed: each bucket once full and after the one before). Empty for naive and
// flat, which launch after backward.
std::vector<std::pair<double, double>> launches_of(const Base& b, const Target& t,
                                                   const std::vector<double>& ready) {
  if (t.strategy == Strategy::kBucketed) return bucket_launches(ready, b.bytes, t.bucket_mb);
  std::vector<std::pair<double, double>> launches;
  if (t.strategy != Strategy::kOverlap) return launches;
  std::vector<size_t> order(ready.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return ready[x] < ready[y]; });
  double launch = 0;
  for (size_t i : order) {
    launch = std::max(launch, ready[i]);
    launches.push_back({launch, static_cast<double>(b.bytes[i])});
  }
  return launches;
}

SyncReplay replay_sync(const Base& b, const Target& t, const std::vector<double>& ready,
                       double backward_end, LinkQueue& link) {
  SyncReplay r;
  const double total = std::accumulate(b.bytes.begin(), b.bytes.end(), 0.0);
  const double optimizer = b.optimizer_full_s * t.own;
  if (t.strategy == Strategy::kNaive) {
    double at = backward_end;  // blocking, one parameter after another in registration order
    for (auto bytes : b.bytes) at = link.run(at, static_cast<double>(bytes) * t.wire);
  } else if (t.strategy == Strategy::kFlat) {
    link.run(backward_end, total * t.wire);
  }
  // AdamW per bucket as each lands (the rank computes meanwhile); ZeRO-1's owners then
  // broadcast it, queued behind the all-reduces, which were all launched by the end of backward.
  double at = backward_end;
  std::vector<std::pair<double, double>> broadcasts;
  for (const auto& [launch, bytes] : launches_of(b, t, ready)) {
    const double done = link.run(launch, bytes * t.wire);
    if (!t.optimizer_per_bucket) continue;
    const double chunk = total > 0 ? optimizer * bytes / total : 0;
    const double begin = std::max(at, done);
    at = begin + chunk;
    link.computing(begin, at);
    r.overlapped_optimizer_s += chunk;
    if (t.sharded) broadcasts.push_back({at, bytes});
  }
  if (t.optimizer_per_bucket) {
    for (const auto& [launch, bytes] : broadcasts) link.run(launch, bytes, 0.5);
    r.end_s = at;
    r.broadcast_wait_s = t.sharded ? std::max(0.0, link.free_at() - at) : 0;
    r.optimizer_after_s = r.broadcast_wait_s;
  } else {
    r.end_s = std::max(backward_end, link.free_at());
    r.optimizer_after_s = optimizer;
    if (t.sharded) {
      const double done = link.run(r.end_s + optimizer, total, 0.5);
      r.broadcast_wait_s = done - (r.end_s + optimizer);
      r.optimizer_after_s += r.broadcast_wait_s;
    }
  }
  r.comm_s = link.busy_s();
  return r;
}

}  // namespace

GroupTransport target_transport(const MeasuredJob& job, const WhatIfChange& change) {
  const int n = change.world_size.value_or(job.world_size);
  if (n <= 1) return GroupTransport::kNone;
  if (!change.transport || *change.transport == Transport::kAuto) {
    // A 1-process job scaled out on one host: auto picks shared memory there.
    return job.result.transport == GroupTransport::kNone ? GroupTransport::kShm
                                                         : job.result.transport;
  }
  return *change.transport == Transport::kGloo ? GroupTransport::kGloo : GroupTransport::kShm;
}

StepFigures measured_figures(const MeasuredJob& job) {
  std::vector<double> step, fwd, bwd, opt, comm, exposed;
  for (const auto& s : job.result.steps) {
    if (s.step < job.options.warmup_steps) continue;
    step.push_back(s.step_seconds);
    fwd.push_back(s.forward_seconds);
    bwd.push_back(s.backward_seconds);
    opt.push_back(s.optimizer_seconds);
    comm.push_back(s.comm_seconds);
    exposed.push_back(s.exposed_comm_seconds);
  }
  StepFigures f;
  f.options = job.options;
  f.world_size = job.world_size;
  f.transport = job.result.transport;
  f.step_s = median(step);
  f.forward_s = median(fwd);
  f.backward_s = median(bwd);
  f.optimizer_s = median(opt);
  f.comm_s = median(comm);
  f.exposed_comm_s = median(exposed);
  derive_rates(f);
  f.memory = estimate_rank_memory(job.options, job.world_size);
  f.peak_bytes = job.result.memory.after_step.peak_bytes;
  return f;
}

const std::vector<std::string>& replay_limits() {
  static const std::vector<std::string> limits{
      "fsdp is not replayed: its per-unit gathers wait on forward's per-unit compute, which the "
      "profile does not record",
      "compute per rank follows the local batch and the cores each rank gets; cache and memory "
      "bandwidth shared by more ranks are not modeled",
      "the link is one alpha and beta per all-reduce, scaled by a ring's bytes to another world "
      "size; another transport needs a comm job's fit (--link-from)",
      "flat's copies into and out of its buffer, and zero_grad's cost under another strategy, "
      "are taken as the measured job's",
      "another model, device, precision or batch is not replayed: submit it"};
  return limits;
}

namespace {

void refuse_unless_replayable(const MeasuredJob& job, const DdpJobOptions& target) {
  const std::string id = "job " + job.job_id;
  if (job.options.device != Device::kCpu) {
    throw ReplayRefused(id + " ran on " + enum_name(job.options.device) +
                        ": the replay times CPU jobs only (its profile is on the host clock)");
  }
  if (job.options.strategy == Strategy::kFsdp) {
    throw ReplayRefused(id +
                        " ran fsdp, whose gradients are sharded: measure a replicated"
                        " strategy (naive, flat, overlap, bucketed) and replay that");
  }
  if (job.result.profile.steps.empty() || job.result.profile.gradients.empty()) {
    throw ReplayRefused(id +
                        " has no step profile (it ended before a step, or ran before ddpd"
                        " recorded profiles): run it again");
  }
  if (target.strategy == Strategy::kFsdp) {
    throw ReplayRefused("--strategy fsdp: " + replay_limits().front() +
                        "; measure it (ddpctl tune, or submit it)");
  }
}

DdpJobOptions changed_options(const MeasuredJob& job, const WhatIfChange& change) {
  DdpJobOptions o = job.options;
  if (change.strategy) o.strategy = *change.strategy;
  if (change.bucket_size_mb) o.bucket_size_mb = *change.bucket_size_mb;
  if (change.transport) o.transport = *change.transport;
  if (change.shard_optimizer) o.shard_optimizer = *change.shard_optimizer;
  if (change.grad_accum) o.grad_accum = *change.grad_accum;
  return o;
}

// One configuration replayed on `link` (unused at one rank); `tail_s` is the last backward's
// end to the synchronisation's end.
StepFigures replay_with(const MeasuredJob& job, const Base& b, const DdpJobOptions& options, int n,
                        const LinkModel& link, double* tail_s = nullptr) {
  StepFigures f;
  f.options = options;
  f.world_size = n;
  const double scale = compute_scale(job, n, job.result.profile.host_cores);
  f.forward_s = b.forward_s * scale;
  f.backward_s = b.backward_s * scale;
  const double last_backward = b.last_backward_s * scale *
                               static_cast<double>(job.options.grad_accum) /
                               static_cast<double>(options.grad_accum);
  // zero_grad: the bucketed strategy zeroes its flat buffers; the others drop gradients, and one
  // rank has no synchroniser at all.
  const bool base_zeroes = job.options.strategy == Strategy::kBucketed && job.world_size > 1;
  const bool target_zeroes = options.strategy == Strategy::kBucketed && n > 1;
  const double zero_grad = base_zeroes && !target_zeroes ? 0 : b.zero_grad_s;
  double tail = 0;        // the last backward's end to the synchronisation's end
  double after_sync = 0;  // the optimizer after it
  if (n <= 1) {
    f.optimizer_s = after_sync = b.optimizer_full_s;
  } else {
    Target t;
    t.strategy = options.strategy;
    t.bucket_mb = options.bucket_size_mb;
    t.world = n;
    t.sharded = options.shard_optimizer;
    t.optimizer_per_bucket = t.strategy == Strategy::kBucketed && options.clip_grad_norm == 0;
    t.wire = options.grad_compression == GradCompression::kNone ? 1.0 : 0.5;
    t.own = t.sharded ? rank0_owned_fraction(b.bytes, n) : 1.0;
    std::vector<double> ready;
    for (double fraction : b.ready_fraction) ready.push_back(fraction * last_backward);
    LinkQueue queue(link_cost(link), link.speed_while_computing);
    queue.computing(0, last_backward);
    const SyncReplay r = replay_sync(b, t, ready, last_backward, queue);
    tail = r.end_s - last_backward;
    after_sync = r.optimizer_after_s;
    f.optimizer_s = r.overlapped_optimizer_s + r.optimizer_after_s;
    f.exposed_comm_s = tail - r.overlapped_optimizer_s + r.broadcast_wait_s;
    f.comm_s = r.comm_s;
  }
  if (tail_s) *tail_s = tail;
  f.step_s = zero_grad + f.forward_s + f.backward_s + tail + after_sync + b.residual_s;
  derive_rates(f);
  f.memory = estimate_rank_memory(options, n);
  const auto before = estimate_rank_memory(job.options, job.world_size);
  f.peak_bytes = job.result.memory.after_step.peak_bytes + (f.memory.total() - before.total());
  return f;
}

}  // namespace

LinkModel replay_link(const MeasuredJob& job, const WhatIfChange& change,
                      const std::optional<LinkModel>& given) {
  const int n = change.world_size.value_or(job.world_size);
  const GroupTransport transport = target_transport(job, change);
  const std::string& runs = enum_name(transport);
  if (given) {
    if (given->transport != transport) {
      throw ReplayRefused("--link-from: " + given->source + " measured " +
                          enum_name(given->transport) + ", and this configuration runs " + runs);
    }
    // A comm job measures the link alone; how fast it goes while the ranks compute is the job's.
    LinkModel link = *given;
    try {
      link.speed_while_computing = fit_link_from_job(job).speed_while_computing;
    } catch (const ReplayRefused&) {
      link.speed_while_computing = 0.5;  // the bucket advisor's default (planning.md)
    }
    return scaled_link(link, n);
  }
  if (transport != job.result.transport) {
    throw ReplayRefused("--transport " + runs + ": job " + job.job_id + " ran " +
                        enum_name(job.result.transport) +
                        ", so its own collectives do not measure " + runs +
                        "; pass a comm job on " + runs + " (--link-from)");
  }
  return scaled_link(fit_link_from_job(job), n);
}

StepFigures predict(const MeasuredJob& job, const WhatIfChange& change,
                    const std::optional<LinkModel>& link) {
  const int n = change.world_size.value_or(job.world_size);
  const DdpJobOptions options = changed_options(job, change);
  refuse_unless_replayable(job, options);
  validate(options, n);  // OptionError naming the flag, as submit would
  StepFigures f = replay_with(job, base_of(job), options, n,
                              n > 1 ? replay_link(job, change, link) : LinkModel{});
  f.transport = target_transport(job, change);
  return f;
}

BucketSweep bucket_sweep(const MeasuredJob& job) {
  BucketSweep sweep;
  double best_s = 0;
  for (double mb : kSweepBucketMb) {
    WhatIfChange change;
    change.strategy = Strategy::kBucketed;
    change.bucket_size_mb = mb;
    StepFigures f = predict(job, change);
    if (sweep.points.empty() || f.step_s < best_s) {
      sweep.best_mb = mb;
      best_s = f.step_s;
    }
    sweep.points.emplace_back(mb, std::move(f));
  }
  return sweep;
}

}  // namespace ddpd
