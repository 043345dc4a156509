// Training batches: random tokens, or windows of a flat binary token file.
#pragma once

#include <torch/torch.h>

#include "ddpd/job_options.h"

namespace ddpd::detail {

// Every rank draws the same global batch from the same generator and keeps its own rows, so
// N ranks together see exactly the batch one process would.
class TokenBatches {
 public:
  TokenBatches(const DdpJobOptions& options, int64_t vocab_size);
  // [batch_size, context + 1] int64 tokens of the next global batch.
  torch::Tensor next_global_batch();

 private:
  int64_t batch_size_;
  int64_t context_;
  int64_t vocab_size_;
  at::Generator generator_;
  torch::Tensor tokens_;  // the token file, int64; undefined for random data
};

}  // namespace ddpd::detail
