// --activation-checkpointing in one process: the loss and every gradient are bitwise those of a
// run without it (activation_checkpoint.h says why they can be), for each attention kernel, with
// grouped-query attention and q/k/v biases (the Llama/Qwen2 shapes --init-from brings), over two
// accumulated micro-batches, and each parameter's gradient-accumulator hook fires once per
// backward, as overlap, bucketed and fsdp need.
#include <gtest/gtest.h>

#include <torch/csrc/autograd/utils/lambda_post_hook.h>

#include "ddpd/core/model.h"
#include "device/device.h"

namespace ddpd {
namespace {

ModelConfig llama_like(Attention attention) {
  ModelConfig c;
  c.vocab_size = 97;
  c.d_model = 48;
  c.d_ff = 80;
  c.num_layers = 3;
  c.num_heads = 6;
  c.num_kv_heads = 2;  // GQA: 3 query heads per key/value head
  c.qkv_bias = true;
  c.attention = attention;
  return c;
}

struct Outcome {
  std::vector<double> losses;
  std::vector<torch::Tensor> grads;
  std::vector<int> hook_calls;  // per parameter, over the whole run
};

// Two micro-batches accumulated into the gradients, as --grad-accum 2 runs them.
Outcome train(const ModelConfig& config, ActivationCheckpointing mode) {
  torch::manual_seed(7);
  TransformerLM model(config);
  model->set_activation_checkpointing(mode);
  const auto params = unique_trainable_parameters(*model);
  Outcome run;
  run.hook_calls.assign(params.size(), 0);
  std::vector<std::shared_ptr<torch::autograd::Node>> keep;
  for (size_t i = 0; i < params.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(params[i]);
    accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [&run, i](const torch::autograd::variable_list& out,
                  const torch::autograd::variable_list&) {
          ++run.hook_calls[i];
          return out;
        }));
    keep.push_back(accumulator);
  }
  const auto tokens = torch::randint(0, config.vocab_size, {2, 2, 17}, torch::kInt64);
  for (int64_t k = 0; k < 2; ++k) {
    const auto micro = tokens[k];
    auto loss = language_model_loss(model->forward(micro.narrow(1, 0, 16)), micro.narrow(1, 1, 16));
    (loss / 2.0).backward();
    run.losses.push_back(loss.item<double>());
  }
  for (const auto& p : params) run.grads.push_back(p.grad().clone());
  return run;
}

void expect_bitwise_equal(const Outcome& got, const Outcome& want) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t k = 0; k < got.losses.size(); ++k) EXPECT_EQ(got.losses[k], want.losses[k]);
  ASSERT_EQ(got.grads.size(), want.grads.size());
  for (size_t i = 0; i < got.grads.size(); ++i) {
    EXPECT_TRUE(torch::equal(got.grads[i], want.grads[i]))
        << "parameter " << i << ": max |diff| "
        << (got.grads[i] - want.grads[i]).abs().max().item<double>();
  }
}

TEST(ActivationCheckpoint, BlockAndSelectiveGiveBitwiseTheLossAndGradients) {
  for (Attention attention : {Attention::kNaive, Attention::kFlash, Attention::kSdpa}) {
    SCOPED_TRACE(enum_name(attention));
    const ModelConfig config = llama_like(attention);
    const Outcome plain = train(config, ActivationCheckpointing::kNone);
    for (auto mode : {ActivationCheckpointing::kBlock, ActivationCheckpointing::kSelective}) {
      SCOPED_TRACE(enum_name(mode));
      expect_bitwise_equal(train(config, mode), plain);
    }
  }
}

// Two bf16 autocast steps with an SGD update between them, as --precision bf16 runs them. The
// recompute must cast as the forward did, and no cast may outlive its step: autocast caches a
// weight's bf16 copy, and one cached in the recompute handed step 1 the weights before the update.
Outcome train_bf16(const ModelConfig& config, ActivationCheckpointing mode) {
  torch::manual_seed(7);
  TransformerLM model(config);
  model->set_activation_checkpointing(mode);
  const auto params = unique_trainable_parameters(*model);
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.5));
  Outcome run;
  const auto tokens = torch::randint(0, config.vocab_size, {2, 2, 17}, torch::kInt64);
  for (int64_t step = 0; step < 2; ++step) {
    sgd.zero_grad();
    torch::Tensor loss;
    {
      detail::AutocastScope autocast(at::kCPU, true);
      loss = language_model_loss(model->forward(tokens[step].narrow(1, 0, 16)),
                                 tokens[step].narrow(1, 1, 16));
    }
    loss.backward();
    run.losses.push_back(loss.item<double>());
    for (const auto& p : params) run.grads.push_back(p.grad().clone());
    sgd.step();
  }
  return run;
}

TEST(ActivationCheckpoint, Bf16AutocastStepsAreBitwiseTheSame) {
  const ModelConfig config = llama_like(Attention::kNaive);
  const Outcome plain = train_bf16(config, ActivationCheckpointing::kNone);
  for (auto mode : {ActivationCheckpointing::kBlock, ActivationCheckpointing::kSelective}) {
    SCOPED_TRACE(enum_name(mode));
    expect_bitwise_equal(train_bf16(config, mode), plain);
  }
}

TEST(ActivationCheckpoint, EachGradientHookFiresOncePerBackward) {
  const Outcome plain = train(llama_like(Attention::kNaive), ActivationCheckpointing::kNone);
  for (auto mode : {ActivationCheckpointing::kBlock, ActivationCheckpointing::kSelective}) {
    const Outcome run = train(llama_like(Attention::kNaive), mode);
    for (size_t i = 0; i < run.hook_calls.size(); ++i) {
      EXPECT_EQ(run.hook_calls[i], 2) << enum_name(mode) << ", parameter " << i;
      EXPECT_EQ(plain.hook_calls[i], 2) << "parameter " << i;
    }
  }
}

TEST(ActivationCheckpoint, TiedEmbeddingsAndEvaluationWithoutGrad) {
  ModelConfig config = llama_like(Attention::kNaive);
  config.tie_embeddings = true;
  expect_bitwise_equal(train(config, ActivationCheckpointing::kBlock),
                       train(config, ActivationCheckpointing::kNone));
  // Under NoGradGuard (evaluation) nothing is saved and the logits are the same.
  torch::manual_seed(3);
  TransformerLM model(config);
  const auto tokens = torch::randint(0, config.vocab_size, {2, 9}, torch::kInt64);
  torch::NoGradGuard no_grad;
  const auto plain = model->forward(tokens);
  model->set_activation_checkpointing(ActivationCheckpointing::kBlock);
  EXPECT_TRUE(torch::equal(model->forward(tokens), plain));
}

}  // namespace
}  // namespace ddpd
