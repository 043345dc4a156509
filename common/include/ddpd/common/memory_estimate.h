// What one rank of a DDP job holds in memory at its peak, predicted before anything is
// allocated: `ddpctl plan memory`, the admission check of the coordinator (against the workers'
// advertised memory) and of the standalone runners (against this machine's). Plain arithmetic on
// the job model; what it predicts is the result's memory.step_peak_tensor_bytes, the allocator's
// count of live CPU tensor bytes (core/src/device/counting_allocator.h), plus the shm
// transport's shared segments, which are memory but no tensor allocation.
//
// The derivation (docs/planning.md#predicted-peak has it with the measurements). Per rank, fp32
// (bf16 autocast keeps fp32 master weights; its activations are counted at 4 bytes, an
// over-estimate of at most 2×). P parameters; T = r·t tokens of a micro-batch (r rows of this
// rank's share); d model width, f d_ff, h heads, q = h·head_dim, V vocabulary, L blocks.
//  - Saved for backward, per block and token, without checkpointing: the inputs of the two
//    RMSNorms' products and their outputs (x·rsqrt, y; h·rsqrt, z), the residual h and the
//    block's output: 6 d; RoPE'd q and k, v (the copy matmul makes of its transposed view; with
//    grouped-query attention the repeated k and v), and the attention output's copy for o: 4 q;
//    w1's and w3's outputs, silu's, and their product: 4 f. RoPE's products save only cos and
//    sin, so the linears' q and k outputs are freed. Naive attention adds the probabilities,
//    r·h·t² per block (the scores before them are not saved); flash/sdpa their output and
//    log-sum-exp instead, T·(q + h).
//  - The edges: the embedding's output and the final norm's two, 3·T·d; the loss: the
//    log-softmax it saves, its gradient and the logits' gradient, 3·T·V at once, when backward
//    starts. That instant is the peak whenever activations dominate: every saved tensor is
//    alive and no gradient has been made yet (the replicated strategies' zero_grad drops them).
//  - --activation-checkpointing block keeps each block's input only (T·d, the previous block's
//    output); backward recomputes one block's full set at a time. selective recomputes the
//    attention core: the probabilities (naive) or the core's output (flash/sdpa) are not kept.
//  - The head's backward: the logits' gradient (T·V) and the head's fresh gradient; under fsdp
//    the head unit and the next block gathered with both their full gradients, and 2·T·V (the
//    log-softmax's output is still alive); at small T·V this is fsdp's peak.
//  - A block's backward, besides: its gradients' chain, about max(3·T·f, 2·r·h·t²) + 2·T·d.
//  - The end of backward: every gradient (4P), plus flat's flattened copy (4P); bucketed's
//    gradients are its buckets, made once (4P), in shared memory over shm.
//  - fsdp: its shards of weights, gradients and moments (4P, 4P, 8P over n, twice with
//    --shard-replicas 1); when backward starts the last unit (final norm and head) is still
//    gathered; in a block's backward the block, its prefetched successors and up to two units'
//    full gradients. --reshard-after-forward false keeps every unit gathered (4P).
// The peak is the largest of those instants (loss, head, block backward, gradients).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ddpd/common/job_options.h"

namespace ddpd {

// Bytes per rank at the predicted peak, by kind.
struct RankMemoryEstimate {
  int64_t parameter_bytes = 0;   // weights: the whole model, or fsdp's shard + units gathered
  int64_t gradient_bytes = 0;    // gradient tensors alive at the peak (bucketed's buckets)
  int64_t optimizer_bytes = 0;   // AdamW's two moments (ZeRO-1, fsdp: this rank's share)
  int64_t activation_bytes = 0;  // saved tensors, the loss's and backward's transients
  int64_t shared_bytes = 0;      // shm segments (bucketed's buckets over shm): not tensors
  const char* phase = "";        // "loss backward", "head backward", "block backward", "gradients"
  // What the allocator counts: memory.step_peak_tensor_bytes.
  int64_t tensor_bytes() const {
    return parameter_bytes + gradient_bytes + optimizer_bytes + activation_bytes;
  }
  int64_t total() const { return tensor_bytes() + shared_bytes; }  // what admission compares
};

// For `options` (validated) at `world_size` ranks; `shm`: the ranks share memory (the shm
// transport), so bucketed's buckets are shared segments. Saturates at INT64_MAX instead of
// overflowing (a context of 10^8 tokens squares past it).
RankMemoryEstimate estimate_rank_memory(const DdpJobOptions& options, int world_size,
                                        bool shm = false);

// "needs about 12.6 GB per rank at its peak (weights 0.01, gradients 0.01, optimizer state
// 0.02, activations 12.6 GB)": for error messages.
std::string describe(const RankMemoryEstimate& estimate);

// A change of one flag that makes the job fit, with the peak it predicts.
struct MemoryRemedy {
  std::string flag;   // "--strategy", "--activation-checkpointing", "--batch"
  std::string value;  // "fsdp", "block", "16"
  int64_t total_bytes = 0;
};
// Of --strategy fsdp (world > 1), --activation-checkpointing block and the largest smaller
// --batch (a multiple of world × --grad-accum), those whose prediction fits `available_bytes`.
std::vector<MemoryRemedy> memory_remedies(const DdpJobOptions& options, int world_size,
                                          int64_t available_bytes);

// Throws OptionError when the predicted peak exceeds `available_bytes` (> 0; 0: no limit
// known). The message names the peak, the limit and `where` ("this machine's available memory",
// "the largest worker's memory"), and each remedy that fits; the error's flag is the first
// remedy's, else largest_memory_cause().
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
