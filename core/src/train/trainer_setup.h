// The Trainer's construction steps that stand on their own: the job checked against its
// communicator, the compute threads, the synchroniser's options, and the model built with its
// initial parameters (checkpointing.h says where they come from).
//
// Thread contract: the constructing thread's (the Trainer's training thread).
#pragma once

#include <memory>

#include "ddpd/common/job_options.h"
#include "ddpd/core/communicator.h"
#include "ddpd/core/grad_sync.h"
#include "ddpd/core/model.h"
#include "ddpd/core/trainer.h"
#include "train/checkpoint.h"
#include "train/checkpointing.h"

namespace ddpd::detail {

// The job against the communicator it runs on: validate() at this world size, and a device and
// precision the communicator's device can run. OptionError otherwise.
void check_job(const DdpJobOptions& options, const Communicator& comm);

// Sets LibTorch's intra-op threads and, when the BLAS in use is OpenBLAS, its thread count
// too (OpenBLAS otherwise starts one thread per core in every rank and oversubscribes).
void set_compute_threads(int threads);

// The job's options that the synchroniser reads (make_synchronizer).
SyncOptions sync_options_of(const DdpJobOptions& options);

struct InitialModel {
  TransformerLM model{nullptr};
  ParameterShapes parameter_shapes;
  // fsdp at world > 1 with --init-from or --resume: the file each rank reads its shards from
  // while the synchroniser is built (the model holds no memory until then); null otherwise.
  std::unique_ptr<ParameterSource> shard_source;
};

// The model, seeded with seed + rank, on `comm`'s device, through `hooks`' configure_model and
// prepare_model, with its initial parameters: random, --init-from's or `resumed`'s (null: no
// resume). A rank that is `joining` a running job draws none: it takes them from a survivor.
InitialModel build_model(const DdpJobOptions& options, const TrainerHooks& hooks,
                         const Communicator& comm, bool joining, CheckpointReader* resumed);

}  // namespace ddpd::detail
