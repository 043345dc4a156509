// The Trainer's parameters in and out of files: where they start (random, --init-from's
// Hugging Face weights, or --resume's checkpoint), the checkpoint's AdamW state and step on a
// resume, and --export-hf. The checkpoint's save and the file format are training_checkpoint.h
// and checkpoint.h; the Hugging Face side is hf/hf_weights.h.
//
// Thread contract: the training thread's; export_model is a collective (every rank calls it).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ddpd/common/job_options.h"
#include "ddpd/core/communicator.h"
#include "ddpd/core/grad_sync.h"
#include "ddpd/core/model.h"
#include "train/checkpoint.h"
#include "train/training_checkpoint.h"

namespace ddpd::detail {

// The model's unique parameters' names and shapes, taken before the synchroniser exists (fsdp
// frees the full parameters between steps).
using ParameterShapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

// The checkpoint directory --resume names ("" where the job does not resume, or where the rank
// joins a running job: it takes a survivor's state instead).
std::string resume_directory(const DdpJobOptions& options, bool joining);

// Whether fsdp reads each rank's shards of the initial parameters from their file (--init-from's
// or the checkpoint's) rather than every rank holding the whole model: fsdp at world > 1, not
// joining, with a file to read.
bool reads_initial_shards(const DdpJobOptions& options, int world, bool joining, bool resuming);

// The model's initial parameters from `resumed` (null: no resume) or --init-from, into the model
// (`named`: its unique parameters) before the synchroniser shards or broadcasts them; where
// `read_shards`, the checks alone, and the ParameterSource the synchroniser reads each rank's
// shards from (SyncOptions::source; it reads `resumed`). Null where nothing is read by range.
std::unique_ptr<ParameterSource> load_initial_parameters(
    const DdpJobOptions& options, const ModelConfig& config, TransformerLMImpl& model,
    const std::vector<std::pair<std::string, torch::Tensor>>& named, const ParameterShapes& shapes,
    CheckpointReader* resumed, bool read_shards);

// The rest of a resume, once the optimizer exists: the AdamW state of the parameters this rank
// holds (and its replica's); returns the steps the checkpoint has done, where the run goes on.
int64_t resume_optimizer(CheckpointReader& resumed, const TrainingState& state);

// --export-hf: the full parameters as a Hugging Face model directory (every rank takes part, as
// fsdp gathers; rank 0 writes), its config.json based on --init-from's where there is one.
void export_model(const DdpJobOptions& options, Communicator& comm, GradientSynchronizer& sync,
                  const ModelConfig& config, const ParameterShapes& shapes);

}  // namespace ddpd::detail
