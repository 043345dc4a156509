// Job options for DDP training: the one options struct shared by `ddpd-worker run ddp`,
// `ddpctl submit ddp` and `ddpctl local`. Plain C++ (no LibTorch, no gRPC) so the
// coordinator and client can validate specs without linking the training core.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "ddpd/common/enum_names.h"

namespace ddpd {

// Attention: auto (the default: sdpa on CUDA, naive on CPU) | naive (the full score matrix) |
// flash (FlashAttention-2: the CUDA kernels on a GPU, the tiled algorithm elsewhere; kernels/)
// | sdpa (at::scaled_dot_product_attention: cuDNN's or flash's kernel on CUDA, as PyTorch
// picks, which is what a GPU user of PyTorch gets).
enum class Attention { kAuto, kNaive, kFlash, kSdpa };

// Shape of the Transformer LM (core/include/ddpd/core/model.h).
struct ModelConfig {
  int64_t vocab_size = 10000;
  int64_t d_model = 64;
  int64_t d_ff = 256;
  int64_t num_layers = 2;
  int64_t num_heads = 4;
  double rope_theta = 10000.0;
  // Grouped-query attention: key/value heads, each shared by num_heads / num_kv_heads query
  // heads (1: multi-query). 0: num_heads (plain multi-head attention, every preset).
  int64_t num_kv_heads = 0;
  // Width of one attention head. 0: d_model / num_heads (every preset); a Hugging Face config
  // may give another (then q and o are num_heads * head_dim wide).
  int64_t head_dim = 0;
  double rms_norm_eps = 1e-5;
  // q, k and v projections carry a bias (Qwen2). Off in every preset.
  bool qkv_bias = false;
  // The LM head reuses the embedding matrix. Off in every preset (an untied head); tests use
  // it to check that a parameter shared by two modules is synchronised once.
  bool tie_embeddings = false;
  // How attention is computed: naive, flash or sdpa (never auto: DdpJobOptions::resolved_model
  // resolves it for the job's device); same values and gradients within float tolerance.
  Attention attention = Attention::kNaive;

  int64_t kv_heads() const { return num_kv_heads > 0 ? num_kv_heads : num_heads; }
  int64_t resolved_head_dim() const { return head_dim > 0 ? head_dim : d_model / num_heads; }
};

// Preset names, smallest first: tiny, small, medium, large, xl, 2.7B.
const std::vector<std::string>& model_preset_names();
// Throws OptionError(--model) for an unknown name.
ModelConfig model_preset(const std::string& name);
// Parameter count of the LM for `config` (equals the Python peer's for the same shape).
int64_t count_parameters(const ModelConfig& config);
// Parameters of one Transformer block: two norm gains, q/k/v/o (with GQA and q/k/v biases) and
// the SwiGLU's three matrices.
int64_t block_parameter_count(const ModelConfig& config);

// --timeout's default: every collective and the rendezvous, 5 minutes as in torch.distributed.
constexpr double kDefaultCollectiveTimeoutSeconds = 300.0;
// --journal-size's default: the collectives each rank's journal keeps (a ring buffer).
constexpr int64_t kDefaultJournalSize = 2000;
// --max-shard-size's default: Hugging Face's save_pretrained shards above 5 GB (decimal).
constexpr int64_t kDefaultMaxShardBytes = 5'000'000'000;
// The largest --timeout accepted: 30 days, in seconds.
constexpr double kMaxCollectiveTimeoutSeconds = 30.0 * 24 * 3600;
// --threads above this is refused; below it, a worker clamps it to its own cores (a rank with
// more intra-op threads than cores only oversubscribes them: 1000 threads ran 10x slower).
constexpr int kMaxThreadsPerRank = 256;

// The job options' enums, each parsed from its name at the boundary (enum_names.h).
// The gradient-sync strategy (docs/usage.md#strategies; core/src/strategies/).
enum class Strategy { kNaive, kFlat, kOverlap, kBucketed, kFsdp };
// Compute precision: fp32, or bf16 autocast with FP32 master weights.
enum class Precision { kFp32, kBf16 };
// Where the ranks compute: cpu (Gloo or shared memory) | cuda (NCCL, the GPU of the local rank).
enum class Device { kCpu, kCuda };
// The element type of a --data token file.
enum class TokenDtype { kUint16, kInt32 };
// What the coordinator does about a stall: fail (the job FAILS with the analysis) | warn (an
// event only).
enum class OnStall { kFail, kWarn };
// The learning-rate schedule after warm-up (learning_rate_at).
enum class LrSchedule { kConstant, kCosine, kLinear };
// Gradients on the wire: none (fp32) | fp16 | bf16 (PyTorch's fp16/bf16_compress_hook).
enum class GradCompression { kNone, kFp16, kBf16 };
// FSDP's units: block (the embedding, each block, the final norm with the head) | whole.
enum class FsdpUnits { kBlock, kWhole };
// Activation checkpointing (docs/activation-checkpointing.md): none (every block's activations
// kept for backward) | block (each Transformer block keeps only its input and recomputes its
// forward in backward) | selective (a block keeps its attention output and recomputes the rest).
enum class ActivationCheckpointing { kNone, kBlock, kSelective };
// Which --eval-data windows an evaluation reads: sampled (the seeded order the training data
// uses) | file (the first windows in file order, so any framework can recompute eval_loss).
enum class EvalOrder { kSampled, kFile };

// How CPU ranks exchange data (docs/shm-transport.md). kAuto, the default: shared memory when
// every rank is on one host and can map the segment, else Gloo with the reason in the result
// (at 2 ranks shm's all-reduce busbw is 4.6x Gloo's and a bucketed DDP step 10 % shorter,
// docs/shm-transport.md). kGloo: TCP. kShm: shared memory or an error. CUDA ranks use NCCL
// whatever it says, so kShm is refused there and kAuto means NCCL.
enum class Transport { kAuto, kGloo, kShm };
// What a process group runs on, once rendezvous has chosen (a result's `transport`): none at
// world size 1, Gloo's TCP, shared memory, or NCCL on CUDA. Transport is the request.
enum class GroupTransport { kNone, kGloo, kShm, kNccl };
// A comm job's process-group backend: gloo (CPU, over Gloo or shared memory) | nccl (CUDA).
enum class Backend { kGloo, kNccl };

// A collective: what comm jobs benchmark (nccl-tests' names), and the op of each collective a
// step records (ProfiledCollective).
enum class Collective { kAllReduce, kAllGather, kReduceScatter, kBroadcast };
// The element type comm jobs benchmark in.
enum class CommDtype { kFloat32, kBFloat16 };

DDPD_ENUM_INFO(Strategy, "--strategy");
DDPD_ENUM_INFO(Precision, "--precision");
DDPD_ENUM_INFO(Attention, "--attention");
DDPD_ENUM_INFO(Device, "--device");
DDPD_ENUM_INFO(TokenDtype, "--data-dtype");
DDPD_ENUM_INFO(OnStall, "--on-stall");
DDPD_ENUM_INFO(LrSchedule, "--lr-schedule");
DDPD_ENUM_INFO(GradCompression, "--grad-compression");
DDPD_ENUM_INFO(FsdpUnits, "--fsdp-units");
DDPD_ENUM_INFO(ActivationCheckpointing, "--activation-checkpointing");
DDPD_ENUM_INFO(EvalOrder, "--eval-order");
DDPD_ENUM_INFO(Transport, "--transport");
DDPD_ENUM_INFO(GroupTransport, "transport");
DDPD_ENUM_INFO(Backend, "--backend");
DDPD_ENUM_INFO(Collective, "--collective");
DDPD_ENUM_INFO(CommDtype, "--dtype");

// A bad option value. `flag()` is the command-line flag name (e.g. "--batch") so every
// front end can say which field is wrong; what() is one line: "--batch: <reason>".
class OptionError : public std::invalid_argument {
 public:
  OptionError(std::string flag, const std::string& reason)
      : std::invalid_argument(flag + ": " + reason), flag_(std::move(flag)) {}
  const std::string& flag() const { return flag_; }

 private:
  std::string flag_;
};

// Throws OptionError(flag, reason) unless `ok`: the one check every validator is written with.
void require(bool ok, const std::string& flag, const std::string& reason);

struct DdpJobOptions {
  std::string model = "tiny";         // preset name; the overrides below win
  std::optional<int64_t> d_model;     // --d-model
  std::optional<int64_t> d_ff;        // --d-ff
  std::optional<int64_t> num_layers;  // --layers
  std::optional<int64_t> num_heads;   // --heads
  std::optional<int64_t> vocab_size;  // --vocab
  int64_t context_length = 64;        // tokens per sample
  int64_t batch_size = 8;             // global batch; each rank gets batch_size / world_size
  int64_t steps = 10;                 // optimizer steps, warm-up included
  int64_t warmup_steps = 2;           // first steps left out of the summary statistics
  uint64_t seed = 0;                  // model init uses seed + rank (rank 0's is broadcast)
  Strategy strategy = Strategy::kBucketed;
  double bucket_size_mb = 25.0;  // bucketed only; MiB (2^20 bytes), as PyTorch DDP
  bool shard_optimizer = false;  // ZeRO-1 optimizer-state sharding (not with fsdp)
  // ZeRO-1: copies of each rank's optimizer shard kept by its ring successor (0 or 1), so a
  // healed job takes a lost rank's shard from memory (docs/healing.md).
  int shard_replicas = 0;
  // AdamW hyper-parameters; defaults are torch.optim.AdamW's.
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  Precision precision = Precision::kFp32;
  Attention attention = Attention::kAuto;  // resolved_attention() says what runs
  // cpu (Gloo) | cuda (NCCL, one GPU per local rank; needs a CUDA build, checked at rendezvous)
  Device device = Device::kCpu;
  std::string data_path;  // empty: random tokens; else a flat binary token file
  TokenDtype data_dtype = TokenDtype::kUint16;  // of data_path
  int64_t spread_every = 1;                     // measure param spread every K steps (0: never)
  double max_param_spread = 0.0;  // fail the job when spread exceeds it (0: never fail)
  int threads = 0;                // intra-op threads per rank; 0: cores / world size (one host)
  double collective_timeout_s = kDefaultCollectiveTimeoutSeconds;  // collectives and rendezvous
  int64_t journal_size = kDefaultJournalSize;  // collectives each rank's journal keeps
  // Daemon jobs: a stall is S seconds in which no rank completes a collective or a step; the
  // coordinator then names the waiting and the missing ranks (docs/diagnosis.md). 0: never.
  double stall_seconds = 60;
  OnStall on_stall = OnStall::kFail;
  // Daemon jobs: the largest compute score (1 / a rank's compute relative to the other ranks')
  // reported as a straggler, and only when the slowdown also stands out of the job's own step
  // noise for 30 steps (coordinator/src/straggler_watch.h). 0: never.
  double straggler_threshold = 0.75;
  std::string inject;  // fault injection (ddpd/common/fault_injection.h); empty: none
  // Debug: every collective is preceded by an all-gather of its fingerprint, and a mismatch
  // fails the job naming both sides (CommunicatorOptions::check_collectives). Off.
  bool check_collectives = false;
  Transport transport = Transport::kAuto;  // how CPU ranks exchange data (Transport)
  // Checkpoints (docs/checkpoints.md): every K steps into DIR/step-NNNNNN, keeping the newest N
  // (0: all). Off while checkpoint_every is 0.
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  int64_t keep_checkpoints = 0;
  // Continue from DIR/step-N, from DIR's `latest`, or "latest" under checkpoint_dir. --steps stays
  // the job's total: resuming step 4 with --steps 8 trains steps 5-8.
  // "auto": the latest checkpoint under checkpoint_dir if there is one, else the start (what an
  // automatic restart runs with).
  std::string resume;
  // Daemon jobs: restart the job from its latest checkpoint after a lost rank, a failed rank or
  // a stall under --on-stall fail, at most this many times; a restart may shrink the job to
  // min_world_size ranks when too few workers are idle (0: the job's world size, no shrink).
  int max_restarts = 0;
  int min_world_size = 0;
  // Daemon jobs: never heal a lost rank in place (docs/healing.md), restart as above instead: for
  // drills, and to measure one beside the other (tests/bench/bench_heal.sh).
  bool no_heal = false;
  // Learning-rate schedule over the job's --steps: constant | cosine | linear (decaying to
  // min_lr), after a linear warm-up of lr_warmup_steps from lr / W to lr. See learning_rate_at.
  LrSchedule lr_schedule = LrSchedule::kConstant;
  int64_t lr_warmup_steps = 0;
  double min_lr = 0.0;
  // Clip the gradients' global norm (over every rank's shard, each parameter once) to this,
  // as torch.nn.utils.clip_grad_norm_ does (0: no clipping).
  double clip_grad_norm = 0.0;
  // Gradient accumulation: each rank's share of the global batch (--batch stays the global batch
  // per optimizer step) runs as K micro-batches; only the last backward synchronises.
  int64_t grad_accum = 1;
  // Gradient communication: none (fp32) | fp16 | bf16 (PyTorch's fp16/bf16_compress_hook: divide
  // by N, cast, all-reduce, cast back). naive, flat, overlap and bucketed only.
  GradCompression grad_compression = GradCompression::kNone;
  // Byte-level text (vocab 256, each byte a token) instead of --data / random tokens.
  std::string data_text;
  // Held-out loss: every eval_every steps, eval_batches global batches of eval_data (in the
  // training data's format), the mean over ranks reported as eval_loss. Off while eval_every is 0.
  std::string eval_data;
  int64_t eval_every = 0;
  int64_t eval_batches = 4;
  EvalOrder eval_order = EvalOrder::kSampled;
  // A Hugging Face model directory (config.json, model.safetensors or its shards): the model's
  // shape comes from its config and its weights replace the random initialisation
  // (docs/models.md). Empty: the preset, randomly initialised.
  std::string init_from;
  // At the end of the job, rank 0 writes the trained weights here as a Hugging Face model
  // directory (config.json and safetensors) that transformers loads. Empty: no export.
  std::string export_hf;
  // The largest safetensors file an export writes before it shards.
  int64_t max_shard_bytes = kDefaultMaxShardBytes;
  // overlap and bucketed launch gradient collectives in one order every rank agrees on. After
  // the first step they adopt the order in which rank 0's gradients became ready, as c10d's
  // Reducer rebuilds its buckets; static_buckets keeps reverse registration order.
  bool static_buckets = false;
  // A trainable parameter that gets no gradient in a step's backward is an error naming it,
  // unless this is set: then it is reduced as zeros (overlap, bucketed).
  bool find_unused_parameters = false;
  // fsdp (docs/fsdp.md). block: one unit per Transformer block, plus the embedding and the final
  // norm with the LM head (tied weights share one unit), each gathered just before its forward
  // and backward and reduce-scattered as soon as its gradients are complete. whole: the model is
  // one unit, gathered for the whole step (no memory saving; kept for comparison).
  FsdpUnits fsdp_units = FsdpUnits::kBlock;
  // fsdp: units whose all-gather starts ahead of the one computing (0: gather on demand). One
  // unit ahead hides most of the gather behind compute; each adds a unit of full parameters.
  int64_t fsdp_prefetch = 1;
  // fsdp: free a unit's full parameters after its forward and gather them again for its backward
  // (PyTorch FSDP's default). false keeps them from forward to backward: one all-gather less per
  // unit and step, the full model's parameters alive at the end of forward (ZeRO-2-like).
  bool reshard_after_forward = true;
  // Activation checkpointing: block recomputes each Transformer block's forward in its backward
  // (the activations kept fall to one block's input each); selective also keeps each block's
  // attention output. Loss and gradients are bitwise those of none (tests/multirank/).
  ActivationCheckpointing activation_checkpointing = ActivationCheckpointing::kNone;

  // The preset with the overrides applied; with init_from, the shape its config.json gives
  // (reads the file; a shape flag that contradicts it is an OptionError naming both).
  ModelConfig resolved_model() const;
  // `attention` with auto resolved for `device`: sdpa on CUDA, naive on CPU.
  Attention resolved_attention() const;
};

// Every option's default, where a type that carries some of them (SyncOptions, the tuner's plan)
// must start from the same values: they are read from here, never written again.
inline const DdpJobOptions kJobDefaults{};

// Checks every field for a job of `world_size` ranks; throws OptionError naming the flag.
void validate(const DdpJobOptions& options, int world_size);

// The learning rate of step `step` (0-based) under the job's schedule: lr * (step + 1) / W during
// the warm-up, then constant lr, or from lr down to min_lr over the remaining steps by half a
// cosine or linearly (reaching min_lr at the last step).
double learning_rate_at(const DdpJobOptions& options, int64_t step);

}  // namespace ddpd
