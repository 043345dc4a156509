#include "ddpd/core/model.h"

#include "ddpd/kernels/flash_attention.h"
#include "device/storage_memory.h"
#include "train/activation_checkpoint.h"

#include <cmath>
#include <unordered_set>

namespace ddpd {
namespace {

// How the modules below make their parameters (ParameterMemory).
struct ParameterMaker {
  ParameterMemory memory = ParameterMemory::kInitialised;
  at::Device device = at::kCPU;

  bool initialises() const { return memory == ParameterMemory::kInitialised; }
  torch::Tensor uniform(at::IntArrayRef sizes, double bound) const {
    if (!initialises()) return placeholder(sizes);
    return torch::empty(sizes).uniform_(-bound, bound);
  }
  torch::Tensor ones(at::IntArrayRef sizes) const {
    return initialises() ? torch::ones(sizes) : placeholder(sizes);
  }
  // A parameter whose values come from elsewhere: memory left uninitialised, or none.
  torch::Tensor placeholder(at::IntArrayRef sizes) const {
    const auto options = torch::TensorOptions().device(device);
    return memory == ParameterMemory::kUnallocated ? detail::unallocated_tensor(sizes, options)
                                                   : torch::empty(sizes, options);
  }
};

// y = x W^T (+ b); W and b initialised as torch.nn.Linear's (uniform ±1/sqrt(in)).
class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(int64_t in, int64_t out, bool bias, const ParameterMaker& make) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    weight = register_parameter("weight", make.uniform({out, in}, bound));
    if (bias) this->bias = register_parameter("bias", make.uniform({out}, bound));
  }
  // Shares an existing weight (tied embeddings).
  explicit LinearImpl(const torch::Tensor& shared) {
    weight = register_parameter("weight", shared);
  }
  torch::Tensor forward(const torch::Tensor& x) { return torch::linear(x, weight, bias); }
  torch::Tensor weight;
  torch::Tensor bias;  // undefined: none
};
TORCH_MODULE(Linear);

class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t d, double eps, const ParameterMaker& make) : eps_(eps) {
    weight = register_parameter("weight", make.ones({d}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return x * torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps_) * weight;
  }
  torch::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(RMSNorm);

// Rotary position embedding over the last dimension of [b, h, t, d], pairing even/odd lanes.
class Rope {
 public:
  Rope(int64_t head_dim, double theta) : head_dim_(head_dim), theta_(theta) {}

  torch::Tensor apply(const torch::Tensor& x) {
    const int64_t t = x.size(2);
    if (cos_.size(0) != t || cos_.device() != x.device()) build(t, x.device());
    auto x1 = x.slice(-1, 0, head_dim_, 2);
    auto x2 = x.slice(-1, 1, head_dim_, 2);
    return torch::stack({x1 * cos_ - x2 * sin_, x1 * sin_ + x2 * cos_}, -1).flatten(-2);
  }

 private:
  void build(int64_t t, at::Device device) {
    auto inv = 1.0 / torch::pow(theta_, torch::arange(0, head_dim_, 2, torch::kFloat32) /
                                            static_cast<double>(head_dim_));
    auto angles = torch::arange(t, torch::kFloat32).unsqueeze(1) * inv.unsqueeze(0);
    cos_ = angles.cos().to(device);
    sin_ = angles.sin().to(device);
  }
  int64_t head_dim_;
  double theta_;
  torch::Tensor cos_ = torch::empty({0});
  torch::Tensor sin_ = torch::empty({0});
};

class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(const ModelConfig& c, const ParameterMaker& make)
      : heads_(c.num_heads),
        kv_heads_(c.kv_heads()),
        head_dim_(c.resolved_head_dim()),
        attention_(c.attention),
        rope_(c.resolved_head_dim(), c.rope_theta) {
    const int64_t q_width = heads_ * head_dim_, kv_width = kv_heads_ * head_dim_;
    // Registration order matches the Python peer: norms, attention, then the FFN.
    norm1 = register_module("norm1", RMSNorm(c.d_model, c.rms_norm_eps, make));
    norm2 = register_module("norm2", RMSNorm(c.d_model, c.rms_norm_eps, make));
    q = register_module("q", Linear(c.d_model, q_width, c.qkv_bias, make));
    k = register_module("k", Linear(c.d_model, kv_width, c.qkv_bias, make));
    v = register_module("v", Linear(c.d_model, kv_width, c.qkv_bias, make));
    o = register_module("o", Linear(q_width, c.d_model, false, make));
    w1 = register_module("w1", Linear(c.d_model, c.d_ff, false, make));
    w3 = register_module("w3", Linear(c.d_model, c.d_ff, false, make));
    w2 = register_module("w2", Linear(c.d_ff, c.d_model, false, make));
  }

  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t b = x.size(0), t = x.size(1), hd = head_dim_;
    auto y = norm1(x);
    auto split = [&](Linear& proj, int64_t heads) {
      return proj(y).view({b, t, heads, hd}).transpose(1, 2);
    };
    // Grouped-query attention: key/value head j serves query heads j·g .. j·g + g − 1, as
    // transformers' repeat_kv lays them out.
    auto shared = [&](torch::Tensor kv) {
      return kv_heads_ == heads_ ? kv : kv.repeat_interleave(heads_ / kv_heads_, 1);
    };
    auto qh = rope_.apply(split(q, heads_));
    auto kh = shared(rope_.apply(split(k, kv_heads_)));
    auto vh = shared(split(v, kv_heads_));
    // --activation-checkpointing selective recomputes the attention core in backward
    // (activation_checkpoint.h): with naive attention its b·h·t² scores and probabilities are
    // most of a block's activations at long context, for a small share of its FLOPs.
    auto core = [this](const std::vector<torch::Tensor>& qkv) {
      return attention_core(qkv[0], qkv[1], qkv[2]);
    };
    const torch::Tensor attended = recompute_attention_ ? detail::checkpointed(core, {qh, kh, vh})
                                                        : attention_core(qh, kh, vh);
    auto h = x + o(attended.transpose(1, 2).reshape({b, t, heads_ * hd}));
    auto z = norm2(h);
    return h + w2(torch::silu(w1(z)) * w3(z));
  }

  // Selective activation checkpointing: the attention core is recomputed in backward.
  void set_recompute_attention(bool on) { recompute_attention_ = on; }

  RMSNorm norm1{nullptr}, norm2{nullptr};
  Linear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr}, w1{nullptr}, w3{nullptr}, w2{nullptr};

 private:
  // softmax(q kᵀ / √d + causal mask) v over [b, h, t, d] heads, as --attention says.
  torch::Tensor attention_core(const torch::Tensor& qh, const torch::Tensor& kh,
                               const torch::Tensor& vh) {
    const int64_t t = qh.size(2);
    if (attention_ == Attention::kNaive) {
      auto scores =
          torch::matmul(qh, kh.transpose(-1, -2)) / std::sqrt(static_cast<double>(head_dim_));
      scores =
          scores.masked_fill(causal_mask(t, qh.device()), -std::numeric_limits<float>::infinity());
      return torch::matmul(scores.softmax(-1), vh);
    }
    // Under autocast v is in the compute dtype (bf16) while RoPE promoted q and k to fp32;
    // attention runs in v's dtype, as autocast's matmuls would.
    const auto dtype = vh.scalar_type();
    return attention_ == Attention::kFlash
               ? kernels::flash_attention(qh.to(dtype), kh.to(dtype), vh, {/*causal=*/true})
               : at::scaled_dot_product_attention(qh.to(dtype), kh.to(dtype), vh, {},
                                                  /*dropout_p=*/0.0, /*is_causal=*/true);
  }
  const torch::Tensor& causal_mask(int64_t t, at::Device device) {
    if (mask_.size(0) != t || mask_.device() != device) {
      mask_ =
          torch::ones({t, t}, torch::TensorOptions().dtype(torch::kBool).device(device)).triu(1);
    }
    return mask_;
  }
  int64_t heads_;
  int64_t kv_heads_;
  int64_t head_dim_;
  Attention attention_;
  bool recompute_attention_ = false;
  Rope rope_;
  torch::Tensor mask_ = torch::empty({0}, torch::kBool);
};
TORCH_MODULE(Block);

}  // namespace

struct TransformerLMImpl::Layers {
  torch::nn::Embedding embedding{nullptr};
  std::vector<Block> blocks;
  RMSNorm final_norm{nullptr};
  Linear head{nullptr};
};

TransformerLMImpl::TransformerLMImpl(const ModelConfig& config, ParameterMemory memory,
                                     at::Device device)
    : config_(config), layers_(std::make_shared<Layers>()) {
  const ParameterMaker make{memory, device};
  auto embedding = torch::nn::EmbeddingOptions(config.vocab_size, config.d_model);
  if (!make.initialises()) embedding._weight(make.placeholder({config.vocab_size, config.d_model}));
  layers_->embedding = register_module("embedding", torch::nn::Embedding(embedding));
  auto blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.num_layers; ++i) {
    layers_->blocks.push_back(Block(config, make));
    blocks->push_back(layers_->blocks.back());
  }
  layers_->final_norm =
      register_module("final_norm", RMSNorm(config.d_model, config.rms_norm_eps, make));
  layers_->head = register_module(
      "head", config.tie_embeddings ? Linear(layers_->embedding->weight)
                                    : Linear(config.d_model, config.vocab_size, false, make));
}

torch::Tensor TransformerLMImpl::run_unit(size_t unit,
                                          const std::function<torch::Tensor()>& forward) {
  if (!unit_hooks_) return forward();
  unit_hooks_->before_unit_forward(unit);
  return unit_hooks_->after_unit_forward(unit, forward());
}

torch::Tensor TransformerLMImpl::forward(const torch::Tensor& tokens) {
  const size_t blocks = layers_->blocks.size();
  auto x = run_unit(0, [&] { return layers_->embedding(tokens); });
  for (size_t i = 0; i < blocks; ++i) {
    x = run_unit(i + 1, [&] { return forward_block(i, x); });
  }
  return run_unit(forward_order().back(), [&] { return layers_->head(layers_->final_norm(x)); });
}

// --activation-checkpointing block: the block keeps only its input; its forward runs again in
// its backward (activation_checkpoint.h). A first block whose input needs no gradient (a frozen
// embedding) runs plainly: the reentrant recompute could not reach its parameters.
torch::Tensor TransformerLMImpl::forward_block(size_t i, const torch::Tensor& x) {
  Block block = layers_->blocks[i];
  if (checkpointing_ != ActivationCheckpointing::kBlock || !x.requires_grad()) return block(x);
  std::shared_ptr<BlockImpl> impl = block.ptr();
  return detail::checkpointed(
      [impl](const std::vector<torch::Tensor>& in) { return impl->forward(in[0]); }, {x});
}

void TransformerLMImpl::set_activation_checkpointing(ActivationCheckpointing mode) {
  checkpointing_ = mode;
  for (auto& block : layers_->blocks) {
    block->set_recompute_attention(mode == ActivationCheckpointing::kSelective);
  }
}

std::vector<size_t> TransformerLMImpl::forward_order() const {
  std::vector<size_t> order;
  for (size_t u = 0; u <= layers_->blocks.size(); ++u) order.push_back(u);
  order.push_back(config_.tie_embeddings ? 0 : layers_->blocks.size() + 1);
  return order;
}

std::vector<ModelUnit> TransformerLMImpl::units() {
  std::vector<ModelUnit> out;
  out.push_back({"embedding", layers_->embedding->parameters()});
  for (size_t i = 0; i < layers_->blocks.size(); ++i) {
    out.push_back({"blocks." + std::to_string(i), layers_->blocks[i]->parameters()});
  }
  ModelUnit head{"final_norm+head", layers_->final_norm->parameters()};
  for (const auto& p : layers_->head->parameters()) head.parameters.push_back(p);
  if (config_.tie_embeddings) {
    out[0].name = "embedding+final_norm+head";
    for (auto& p : head.parameters) out[0].parameters.push_back(p);
  } else {
    out.push_back(std::move(head));
  }
  for (auto& unit : out) unit.parameters = unique_tensors(unit.parameters);
  return out;
}

// The softmax runs in at least float32: bf16 logits (autocast) are upcast, float64 ones (the
// equivalence tests' verification runs) keep their precision.
torch::Tensor language_model_loss(const torch::Tensor& logits, const torch::Tensor& targets) {
  const auto dtype = at::promote_types(logits.scalar_type(), torch::kFloat32);
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}).to(dtype),
                                              targets.reshape({-1}));
}

std::vector<torch::Tensor> unique_tensors(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> out;
  std::unordered_set<const void*> seen;
  for (const auto& t : tensors) {
    if (seen.insert(t.unsafeGetTensorImpl()).second) out.push_back(t);
  }
  return out;
}

std::vector<torch::Tensor> unique_parameters(torch::nn::Module& module) {
  return unique_tensors(module.parameters(/*recurse=*/true));
}

std::vector<std::pair<std::string, torch::Tensor>> named_unique_parameters(
    torch::nn::Module& module) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  const auto named = module.named_parameters(/*recurse=*/true);
  // named_parameters() lists tensors in parameters()' order, so unique_tensors' choice (the
  // first occurrence) is the one kept here too.
  const auto unique = unique_tensors(named.values());
  size_t next = 0;
  for (const auto& item : named) {
    if (next < unique.size() && item.value().is_same(unique[next])) {
      out.emplace_back(item.key(), item.value());
      ++next;
    }
  }
  return out;
}

std::vector<torch::Tensor> unique_trainable_parameters(torch::nn::Module& module) {
  std::vector<torch::Tensor> trainable;
  for (const auto& p : module.parameters(/*recurse=*/true)) {
    if (p.requires_grad()) trainable.push_back(p);
  }
  return unique_tensors(trainable);
}

}  // namespace ddpd
