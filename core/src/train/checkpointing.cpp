#include "train/checkpointing.h"

#include "ddpd/common/hf_config.h"
#include "hf/hf_weights.h"

namespace ddpd::detail {

std::string resume_directory(const DdpJobOptions& options, bool joining) {
  if (options.resume.empty() || joining) return "";
  return resolve_resume(options.resume, options.checkpoint_dir);
}

bool reads_initial_shards(const DdpJobOptions& options, int world, bool joining, bool resuming) {
  return options.strategy == Strategy::kFsdp && world > 1 && !joining &&
         (resuming || !options.init_from.empty());
}

std::unique_ptr<ParameterSource> load_initial_parameters(
    const DdpJobOptions& options, const ModelConfig& config, TransformerLMImpl& model,
    const std::vector<std::pair<std::string, torch::Tensor>>& named, const ParameterShapes& shapes,
    CheckpointReader* resumed, bool read_shards) {
  if (resumed && read_shards) {
    check_parameters(*resumed, model);
    return std::make_unique<CheckpointParameterSource>(*resumed);
  }
  if (resumed) {
    load_parameters(*resumed, model);  // before the synchroniser shards or broadcasts
  } else if (read_shards) {
    return std::make_unique<HfWeightSource>(options.init_from, config, shapes);
  } else if (!options.init_from.empty()) {
    load_hf_weights(options.init_from, config, named);
  }
  return nullptr;
}

int64_t resume_optimizer(CheckpointReader& resumed, const TrainingState& state) {
  load_optimizer_state(resumed, state);
  return resumed_step(resumed, state.options);
}

void export_model(const DdpJobOptions& options, Communicator& comm, GradientSynchronizer& sync,
                  const ModelConfig& config, const ParameterShapes& shapes) {
  // Every rank takes part (fsdp gathers); rank 0 writes.
  const std::vector<torch::Tensor> full = sync.full_parameters();
  if (comm.info().rank != 0) return;
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (size_t i = 0; i < full.size(); ++i) named.emplace_back(shapes.at(i).first, full[i]);
  const nlohmann::json base =
      options.init_from.empty() ? nlohmann::json::object() : read_hf_config(options.init_from);
  save_hf_model(options.export_hf, config, base, named, options.max_shard_bytes);
}

}  // namespace ddpd::detail
