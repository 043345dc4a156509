// One DDP job that the process runs itself, from torchrun-style variables (MASTER_ADDR,
// MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK): what `ddpd-worker run ddp` and `ddpd-train` both
// do, written once so that their checks, messages and exit codes cannot drift.
#pragma once

#include <functional>
#include <string>

#include "ddpd/core/local_run.h"
#include "ddpd/core/rendezvous.h"
#include "ddpd/core/trainer.h"

namespace ddpd {

// What a caller adds along the way (the worker's `run` feeds its /metrics and its log). Every
// hook is optional and is called on the run's thread, on every rank.
struct StandaloneHooks {
  // After the rendezvous, before the Trainer is built.
  std::function<void(const RendezvousOptions&, const Communicator&)> connected;
  // The Trainer is built (its memory after initialisation is known).
  std::function<void(const Trainer&)> trainer_ready;
  std::function<void(const StepMetrics&)> step;
  // The job succeeded, before rank 0 prints its result.
  std::function<void(const TrainingResult&)> succeeded;
};

struct StandaloneOutput {
  bool json = true;  // rank 0 prints the result, or the failure, as one JSON line
  // Without json: how rank 0 prints a success.
  std::function<void(const TrainingResult&, int world_size)> print_summary;
};

// Runs the job. Exit codes:
//   2: a bad flag, environment or device, refused before training: one line `error: …` naming
//      it (the memory check names the machine's memory per local rank);
//   1: the job failed: `FAILED: rank R: …` on stderr, and with json rank 0 prints
//      {"state": "FAILED", "error": …} on stdout;
//   0: it succeeded; rank 0 printed the result.
// The journal dump and the CUDA snapshot of LocalRunOptions are written either way.
int run_standalone(const DdpJobOptions& job, const LocalRunOptions& local,
                   const StandaloneOutput& output, const StandaloneHooks& hooks = {});

}  // namespace ddpd
