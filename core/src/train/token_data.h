// Training samples in a seeded global order: random tokens, windows of a memory-mapped token
// file, or windows of a text file's bytes.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>

#include "ddpd/common/job_options.h"

namespace ddpd::detail {

// Where samples come from. Exactly one of: random tokens (path empty), a flat binary token file
// of `dtype`, or text whose bytes are the tokens (`text`).
struct SampleSource {
  std::string path;
  bool text = false;
  TokenDtype dtype = TokenDtype::kUint16;  // a token file's (not text)
  std::string flag = "--data";             // named in errors
  // --eval-order file: sample g is window g of the file in file order, windows of context + 1
  // tokens that share nothing (window k is tokens [k(C+1), (k+1)(C+1))), so any framework can
  // recompute the loss over them (docs/data.md). A sample past the last window is an error.
  bool file_order = false;
};

// Sample g (a global index counting from the job's start: step s's global batch is samples
// [s·B, (s+1)·B)) is a function of (seed, g) alone, so every rank computes only its own rows and
// N ranks together see exactly the batch one process would, at any world size.
//   - A file's samples are its non-overlapping windows of context + 1 tokens (neighbours share
//     the boundary token). Epoch e = g / windows visits every window once, in a seeded
//     permutation of its own (a Feistel network: no table, so memory does not grow with the
//     file). The file is memory-mapped and only the windows read are paged in.
//   - Random samples draw context + 1 tokens from a generator seeded by (seed, g).
// Thread contract: samples() may be called from one thread at a time.
class TokenSamples {
 public:
  TokenSamples(const SampleSource& source, int64_t context, int64_t vocab_size, uint64_t seed);
  ~TokenSamples();
  TokenSamples(const TokenSamples&) = delete;
  TokenSamples& operator=(const TokenSamples&) = delete;

  // [count, context + 1] int64 tokens: samples first, first + 1, ..., first + count - 1.
  // Throws OptionError naming the flag when a token is outside the vocabulary.
  torch::Tensor samples(int64_t first, int64_t count) const;

 private:
  struct MappedFile;
  torch::Tensor window(int64_t index) const;
  int64_t window_of_sample(int64_t global_index) const;

  SampleSource source_;
  int64_t context_;
  int64_t vocab_size_;
  uint64_t seed_;
  std::unique_ptr<MappedFile> file_;  // null for random tokens
  int64_t windows_ = 0;
  int64_t stride_ = 0;  // tokens from one window's start to the next's
};

// The job's training samples (--data, --data-text or random) and held-out samples (--eval-data,
// in the training data's format).
SampleSource training_source(const DdpJobOptions& options);
SampleSource eval_source(const DdpJobOptions& options);

}  // namespace ddpd::detail
