// The Transformer LM (CS336 "basics"): token embedding, pre-norm blocks of
// RMSNorm → causal multi-head self-attention with RoPE → residual, RMSNorm → SwiGLU FFN →
// residual; final RMSNorm; LM head. No biases.
#pragma once

#include <torch/torch.h>

#include "ddpd/job_options.h"

namespace ddpd {

class TransformerLMImpl : public torch::nn::Module {
 public:
  explicit TransformerLMImpl(const ModelConfig& config);
  // tokens: [batch, seq] int64 → logits [batch, seq, vocab].
  torch::Tensor forward(const torch::Tensor& tokens);
  const ModelConfig& config() const { return config_; }

 private:
  ModelConfig config_;
  struct Layers;
  std::shared_ptr<Layers> layers_;
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
