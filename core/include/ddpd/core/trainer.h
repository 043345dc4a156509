// DDP training job: model, strategy, optimizer, data and per-step measurement.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "ddpd/common/job_options.h"
#include "ddpd/common/stall_analysis.h"
#include "ddpd/common/training_result.h"
#include "ddpd/core/communicator.h"

namespace ddpd {

class GradientSynchronizer;
class TransformerLMImpl;

// Points where a caller can vary what the job options keep fixed: tests (frozen and tied
// parameters, gradients at every step, injected faults) and tools. Every hook is optional and
// runs on the Trainer's thread; none changes the step sequence itself.
struct TrainerHooks {
  // Before the model is built: edit its configuration (e.g. tie_embeddings).
  std::function<void(ModelConfig&)> configure_model;
  // After the model is built and seeded (seed + rank), before the synchroniser broadcasts rank
  // 0's state: e.g. freeze parameters, or record this rank's own initialisation. Under fsdp at
  // world > 1 with --init-from or --resume the parameters hold no memory yet (shapes, dtype and
  // device only; ParameterMemory::kUnallocated): the synchroniser reads each rank's shards from
  // the file.
  std::function<void(TransformerLMImpl&)> prepare_model;
  // At the start of every step, before any of its work.
  std::function<void(int64_t step)> before_step;
  // After every step's gradient synchronisation, before the optimizer step: the synchroniser's
  // optimizer_parameters() hold the averaged gradients (fsdp: this rank's shards).
  std::function<void(int64_t step, GradientSynchronizer&)> after_gradient_sync;
};

// Where a trainer is; readable from any thread (the worker daemon's heartbeat).
struct TrainerProgress {
  // setup (construction, rank 0's broadcast) | forward (zero_grad, fsdp's gather, forward) |
  // backward | sync (waiting for gradient synchronisation) | optimizer | metrics (the loss and
  // param spread collectives) | idle (after the last step)
  std::string phase;
  int64_t step = 0;
};

// Healing (docs/healing.md): what run() asks for when a collective of a replicated strategy fails
// (not a desync, not a cancel): group generation `generation` (1, 2, …), or a null `comm` to fail
// as a run without healing does. Called on the training thread; it may block.
//  - Healed: the same world, in which a replacement holds the lost rank's number.
//  - Shrunk in place (no spare): one rank fewer, the survivors above the lost rank one number
//    lower; every rank keeps its share of the same global batch (docs/data.md).
struct GroupGeneration {
  std::shared_ptr<Communicator> comm;  // connect_generation's (rendezvous.h)
  int lost_rank = -1;                  // the rank replaced or removed, in the old numbering
};
using Regroup = std::function<GroupGeneration(int generation, const CollectiveError& failure,
                                              Communicator& previous)>;

// run() was told to stop (its `cancelled` returned true, or the communicator was aborted).
class JobCancelled : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// run() ended after writing the checkpoint of `steps_done` steps because a rank was asked to
// (Trainer::stop_after_next_checkpoint): every rank of the job throws it at that checkpoint.
class StoppedAtCheckpoint : public JobCancelled {
 public:
  StoppedAtCheckpoint(int64_t steps_done, int asking_rank);
  int64_t steps_done() const { return steps_done_; }
  int asking_rank() const { return asking_rank_; }  // the lowest rank that was asked

 private:
  int64_t steps_done_;
  int asking_rank_;
};

// Thread contract: one thread drives a Trainer. The observer runs on that thread after each
// step; a cancellation check can be passed to run() and is polled between steps (and by an
// injected hang). progress() may be read from any thread.
//
// The job's --inject (ddpd/common/fault_injection.h) fires on its rank: exit ends the process at
// the start of the step, hang stops there (for its seconds, or until cancelled: then run() throws
// "job cancelled"), slow sleeps factor - 1 times the step's forward and backward time after
// backward, skip-collective makes the communicator drop the step's first collective. Each prints
// "ddpd: inject KIND rank R step S at unix T" to stderr when it fires.
//
// When a collective fails or times out, run() runs the cross-rank analysis before it rethrows:
// every rank that saw the failure writes its position to the rendezvous store and waits (up to
// the collective timeout, at most 10 s) for the others'; each then prints, and appends to the
// CollectiveError it throws, the same analysis the coordinator gives a live stall: the ranks
// that wait, the collective, and the ranks that have not joined it (those that did not report
// are stuck outside collectives, or gone), or a desync (docs/diagnosis.md).
class Trainer {
 public:
  // Builds the model (seeded with seed + rank), the synchroniser (which broadcasts rank 0's
  // state) and the optimizer. Throws OptionError / std::runtime_error on bad input.
  //
  // `join_generation` 0: a rank of a new job (or of its checkpoint restart). G > 0: the rank that
  // replaces a lost one of a running job in group generation G (healing, docs/healing.md): it
  // skips rank 0's initial broadcast and any --resume, fires no --inject, and run() first takes
  // a survivor's state.
  Trainer(const DdpJobOptions& options, std::shared_ptr<Communicator> comm, TrainerHooks hooks = {},
          int join_generation = 0);
  ~Trainer();

  StepMetrics train_step(int64_t step);
  // With `regroup`, a lost rank of a replicated strategy is healed in place (its heals are in
  // the result), and the optimizer steps after the whole synchronisation rather than bucket by
  // bucket, so that a rank's state is at a step boundary whenever a collective fails.
  TrainingResult run(const std::function<void(const StepMetrics&)>& on_step = {},
                     const std::function<bool()>& cancelled = {}, const Regroup& regroup = {});

  // The parameters every rank agrees on (fsdp gathers: a collective).
  std::vector<torch::Tensor> full_parameters();
  const MemoryProfile& memory() const;
  // Thread-safe: may be called from any thread while another drives the trainer.
  TrainerProgress progress() const;
  // progress() with the collective journal's: what a heartbeat carries. Thread-safe.
  RankPosition position() const;
  // The synchronisation that runs (see TrainingResult::synchronization).
  std::string synchronization() const;
  // Thread-safe. Asks run() to end, with StoppedAtCheckpoint, after the next checkpoint it
  // writes. The ranks agree at every checkpoint (a one-element all-reduce, the lowest asking
  // rank), so all of them end at the same one, also when only some were asked, or one was asked
  // just after its peers' checkpoint: none is left in a collective with a rank that has gone.
  void stop_after_next_checkpoint();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddpd
