#include "job_specs.h"

#include <cstdio>

#include "ddpd/api/spec_convert.h"

namespace ddpd::client {

void fit_default_batch(DdpJobOptions& options, const CLI::App& flags, int world_size) {
  const int64_t multiple =
      static_cast<int64_t>(world_size) * std::max<int64_t>(1, options.grad_accum);
  if (flags.count("--batch") > 0 || world_size < 1 || options.batch_size % multiple == 0) return;
  const int64_t fitted = (options.batch_size + multiple - 1) / multiple * multiple;
  std::fprintf(stderr,
               "note: --batch %lld (the default %lld rounded up to a multiple of world size %d x "
               "--grad-accum %lld)\n",
               static_cast<long long>(fitted), static_cast<long long>(options.batch_size),
               world_size, static_cast<long long>(options.grad_accum));
  options.batch_size = fitted;
}

void fit_local_straggler_threshold(DdpJobOptions& options, const CLI::App& flags, int world_size,
                                   unsigned cores) {
  // World 1 has no straggler to name.
  if (flags.count("--straggler-threshold") > 0 || options.straggler_threshold <= 0 || cores == 0 ||
      world_size < 2) {
    return;
  }
  const double shared = static_cast<double>(cores) / (2.0 * world_size);
  if (shared >= options.straggler_threshold) return;
  std::fprintf(stderr,
               "note: --straggler-threshold %.2f (%u cores for %d ranks, 2 busy threads each)\n",
               shared, cores, world_size);
  options.straggler_threshold = shared;
}

v1::JobSpec ddp_spec(const DdpJobOptions& options, int world_size) {
  v1::JobSpec spec;
  spec.set_world_size(world_size);
  *spec.mutable_ddp() = to_proto(options);
  return spec;
}

v1::JobSpec comm_spec(const CommJob& job, int world_size) {
  v1::JobSpec spec;
  spec.set_world_size(world_size);
  *spec.mutable_comm() = to_proto(job);
  return spec;
}

}  // namespace ddpd::client
