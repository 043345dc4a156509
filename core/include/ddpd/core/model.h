// The Transformer LM (CS336 "basics"): token embedding, pre-norm blocks of
// RMSNorm → causal multi-head self-attention with RoPE → residual, RMSNorm → SwiGLU FFN →
// residual; final RMSNorm; LM head. No biases.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include "ddpd/common/job_options.h"

namespace ddpd {

// A group of parameters that FSDP gathers and frees together.
struct ModelUnit {
  std::string name;
  std::vector<torch::Tensor> parameters;  // each once, registration order (frozen ones too)
};

// What a unit-wise wrapper (FSDP) is told around each unit's forward. Thread contract: called on
// the thread that runs forward.
class UnitForwardHooks {
 public:
  virtual ~UnitForwardHooks() = default;
  // Before unit `unit` computes: its parameters must hold their full values on return.
  virtual void before_unit_forward(size_t unit) = 0;
  // After it: returns the output to go on with (the hooks may attach a backward hook to it).
  virtual torch::Tensor after_unit_forward(size_t unit, torch::Tensor output) = 0;
};

// A module that runs as a sequence of units, each unit's parameters used only inside its
// forward (a unit may run more than once in one forward: tied weights).
class UnitwiseModule {
 public:
  virtual ~UnitwiseModule() = default;
  // Every parameter in exactly one unit; indices are what the hooks receive.
  virtual std::vector<ModelUnit> units() = 0;
  // The units in the order one forward runs them (a unit may appear more than once).
  virtual std::vector<size_t> forward_order() const = 0;
  // Not owned; null: none. Set while no forward runs.
  virtual void set_unit_hooks(UnitForwardHooks* hooks) = 0;
};

// What the model's constructor gives each parameter.
//   kInitialised  CPU memory, initialised as torch.nn's modules do, from torch's generator (the
//                 caller seeds it).
//   kUninitialised  memory on the given device, not initialised, and no random draw: a rank that
//                 joins a running job (healing) takes every value from a survivor.
//   kUnallocated  a tensor of the shape and default dtype on the given device whose storage holds
//                 no memory, and no random draw: fsdp's import or resume (SyncOptions::source)
//                 then fills each rank's shard from the file, so no rank holds the whole model.
//                 Reading such a parameter before that is undefined (device/storage_memory.h).
enum class ParameterMemory { kInitialised, kUninitialised, kUnallocated };

// Units, in forward order: unit 0 the embedding, units 1..L the blocks, unit L+1 the final norm
// with the LM head. With tied embeddings the head's weight is the embedding's, so unit 0 holds
// the embedding, the final norm and the head, and runs first and last.
class TransformerLMImpl : public torch::nn::Module, public UnitwiseModule {
 public:
  explicit TransformerLMImpl(const ModelConfig& config,
                             ParameterMemory memory = ParameterMemory::kInitialised,
                             at::Device device = at::kCPU);
  // tokens: [batch, seq] int64 → logits [batch, seq, vocab].
  torch::Tensor forward(const torch::Tensor& tokens);
  const ModelConfig& config() const { return config_; }

  std::vector<ModelUnit> units() override;
  std::vector<size_t> forward_order() const override;
  void set_unit_hooks(UnitForwardHooks* hooks) override { unit_hooks_ = hooks; }
  // --activation-checkpointing: none (the default), block (each block recomputed in backward)
  // or selective (each block's attention core recomputed). Loss and gradients are bitwise
  // those of none on CPU (docs/activation-checkpointing.md). Set while no forward runs.
  void set_activation_checkpointing(ActivationCheckpointing mode);

 private:
  torch::Tensor run_unit(size_t unit, const std::function<torch::Tensor()>& forward);
  torch::Tensor forward_block(size_t i, const torch::Tensor& x);

  ModelConfig config_;
  struct Layers;
  std::shared_ptr<Layers> layers_;
  UnitForwardHooks* unit_hooks_ = nullptr;
  ActivationCheckpointing checkpointing_ = ActivationCheckpointing::kNone;
};
TORCH_MODULE(TransformerLM);

// Mean next-token cross-entropy of `logits` [b, t, v] against `targets` [b, t].
torch::Tensor language_model_loss(const torch::Tensor& logits, const torch::Tensor& targets);

// Each tensor once, in first-seen order: a tied weight appears under several names but is one
// tensor (one TensorImpl). The one place parameters are de-duplicated.
std::vector<torch::Tensor> unique_tensors(const std::vector<torch::Tensor>& tensors);

// The parameters of `module` in registration order, each once even when shared by several
// submodules (tied weights); the trainable ones only, or all of them.
std::vector<torch::Tensor> unique_parameters(torch::nn::Module& module);
std::vector<torch::Tensor> unique_trainable_parameters(torch::nn::Module& module);
// unique_parameters() with each tensor's name (a tied weight under its first name): how
// checkpoints name tensors.
std::vector<std::pair<std::string, torch::Tensor>> named_unique_parameters(
    torch::nn::Module& module);

}  // namespace ddpd
