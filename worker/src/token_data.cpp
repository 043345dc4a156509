#include "token_data.h"

#include <ATen/CPUGeneratorImpl.h>

#include <fstream>

namespace ddpd::detail {
namespace {

torch::Tensor load_tokens(const std::string& path, const std::string& dtype, int64_t vocab) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw OptionError("--data", "cannot open token file '" + path + "'");
  const int64_t bytes = in.tellg();
  const int64_t width = dtype == "uint16" ? 2 : 4;
  if (bytes % width != 0) {
    throw OptionError("--data", "size of '" + path + "' (" + std::to_string(bytes) +
                                    " bytes) is not a multiple of " + std::to_string(width) +
                                    " (--data-dtype " + dtype + ")");
  }
  std::vector<char> raw(bytes);
  in.seekg(0);
  in.read(raw.data(), bytes);
  const int64_t n = bytes / width;
  torch::Tensor tokens =
      width == 2
          ? torch::from_blob(raw.data(), {n}, torch::kInt16).to(torch::kInt32).bitwise_and(0xFFFF)
          : torch::from_blob(raw.data(), {n}, torch::kInt32).clone();
  tokens = tokens.to(torch::kInt64);
  if (n > 0) {
    const int64_t lo = tokens.min().item<int64_t>(), hi = tokens.max().item<int64_t>();
    if (lo < 0 || hi >= vocab) {
      throw OptionError("--data", "token ids in '" + path + "' span [" + std::to_string(lo) + ", " +
                                      std::to_string(hi) + "], outside the vocabulary of " +
                                      std::to_string(vocab));
    }
  }
  return tokens;
}

}  // namespace

TokenBatches::TokenBatches(const DdpJobOptions& options, int64_t vocab_size)
    : batch_size_(options.batch_size),
      context_(options.context_length),
      vocab_size_(vocab_size),
      generator_(at::make_generator<at::CPUGeneratorImpl>(options.seed + 1)) {
  if (!options.data_path.empty()) {
    tokens_ = load_tokens(options.data_path, options.data_dtype, vocab_size);
    if (tokens_.numel() < context_ + 1) {
      throw OptionError("--data", "token file holds " + std::to_string(tokens_.numel()) +
                                      " tokens, fewer than --context + 1");
    }
  }
}

torch::Tensor TokenBatches::next_global_batch() {
  if (!tokens_.defined()) {
    return torch::randint(0, vocab_size_, {batch_size_, context_ + 1}, generator_, torch::kInt64);
  }
  auto starts =
      torch::randint(0, tokens_.numel() - context_, {batch_size_}, generator_, torch::kInt64);
  auto offsets = torch::arange(context_ + 1, torch::kInt64);
  return tokens_.index({starts.unsqueeze(1) + offsets.unsqueeze(0)});
}

}  // namespace ddpd::detail
