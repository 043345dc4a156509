// What one rank of a DDP job needs in memory, estimated before anything is allocated: the
// admission check of the coordinator (against the workers' advertised memory) and of the
// standalone runners (against this machine's). Plain arithmetic on the job model.
#pragma once

#include <cstdint>
#include <string>

#include "ddpd/common/job_options.h"

namespace ddpd {

// Bytes per rank, fp32 (bf16 autocast keeps fp32 master weights; its activations are counted
// at 4 bytes too, an over-estimate of at most 2×).
struct RankMemoryEstimate {
  int64_t parameter_bytes = 0;  // fsdp: the shard plus the units gathered at once
  int64_t gradient_bytes = 0;   // fsdp: the shard plus two units' full gradients
  int64_t optimizer_bytes = 0;  // AdamW's two moments (ZeRO-1, fsdp: this rank's share)
  // Tensors forward saves for backward, per micro-batch: each block's inputs of its linears,
  // norms and activations, the attention scores and probabilities (naive attention: b·h·t² each;
  // flash: none), and the logits with their fp32 copy and gradient.
  int64_t activation_bytes = 0;
  int64_t total() const {
    return parameter_bytes + gradient_bytes + optimizer_bytes + activation_bytes;
  }
};

// For `options` (validated) at `world_size` ranks. Saturates at INT64_MAX instead of
// overflowing (a context of 10^8 tokens squares past it).
RankMemoryEstimate estimate_rank_memory(const DdpJobOptions& options, int world_size);

// "needs about 12.6 GB per rank (parameters 0.01, gradients 0.01, optimizer state 0.02,
// activations 12.6 GB)": for error messages.
std::string describe(const RankMemoryEstimate& estimate);

// Throws OptionError when the estimate exceeds `available_bytes` (> 0; 0: no limit known),
// naming largest_memory_cause(), the estimate, the limit and `where` ("this machine's available
// memory", "the largest worker's memory").
void check_fits_in_memory(const DdpJobOptions& options, int world_size, int64_t available_bytes,
                          const std::string& where);

// The flag behind the estimate's largest part. Parameters and optimizer state: --vocab when the
// embedding and head outweigh the blocks, else --d-model, --layers or --model (whichever the job
// set). Activations: --context when attention's t² scores dominate, --vocab for the logits,
// --batch for the blocks' per-token tensors.
std::string largest_memory_cause(const DdpJobOptions& options, int world_size);

// MemAvailable from /proc/meminfo, capped in a container by what is left of its cgroup's
// memory.max; bytes (0 when it cannot be read). Read once, at start-up.
int64_t available_memory_bytes();

}  // namespace ddpd
