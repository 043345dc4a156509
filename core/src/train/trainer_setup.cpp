#include "train/trainer_setup.h"

#include <dlfcn.h>

#include "device/device.h"

namespace ddpd::detail {

void check_job(const DdpJobOptions& options, const Communicator& comm) {
  validate(options, comm.info().world_size);
  const at::Device device = comm.info().device;
  if (device.is_cuda() != (options.device == Device::kCuda)) {
    throw OptionError("--device",
                      enum_name(options.device) + " job on a " + device.str() + " communicator");
  }
  if (options.precision == Precision::kBf16 && !supports_bf16(device)) {
    throw OptionError("--precision", "bf16 needs a GPU of compute capability 8.0 or later");
  }
}

void set_compute_threads(int threads) {
  at::set_num_threads(threads);
  using SetThreads = void (*)(int);
  if (auto fn = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    fn(threads);
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

InitialModel build_model(const DdpJobOptions& options, const TrainerHooks& hooks,
                         const Communicator& comm, bool joining, CheckpointReader* resumed) {
  const at::Device device = comm.info().device;
  // Each rank initialises differently; the synchroniser broadcasts rank 0's parameters.
  torch::manual_seed(options.seed + comm.info().rank);
  // The allocator's peak is process-wide; a daemon runs many jobs, so start this job's afresh.
  if (device.is_cuda()) reset_cuda_peak_stats(device);
  ModelConfig model_config = options.resolved_model();
  if (hooks.configure_model) hooks.configure_model(model_config);
  const bool read_shards =
      reads_initial_shards(options, comm.info().world_size, joining, resumed != nullptr);
  InitialModel built;
  if (read_shards) {
    built.model = TransformerLM(model_config, ParameterMemory::kUnallocated, device);
  } else {
    // A joining rank takes every value from a survivor: drawing them first would cost the heal
    // time (0.7 s for the `small` preset's 129 M parameters).
    built.model = TransformerLM(
        model_config, joining ? ParameterMemory::kUninitialised : ParameterMemory::kInitialised);
    built.model->to(device);  // before the synchroniser, whose buffers follow the parameters
  }
  built.model->set_activation_checkpointing(options.activation_checkpointing);
  if (hooks.prepare_model) hooks.prepare_model(*built.model);
  const auto named = named_unique_parameters(*built.model);
  for (const auto& [name, p] : named) built.parameter_shapes.emplace_back(name, p.sizes().vec());
  built.shard_source = load_initial_parameters(options, model_config, *built.model, named,
                                               built.parameter_shapes, resumed, read_shards);
  return built;
}

}  // namespace ddpd::detail
