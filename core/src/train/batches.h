// The token rows a rank trains and evaluates on: its share of each global batch (--batch rows
// over the world's ranks, in rank order) of the training samples and of --eval-data's, the
// training share split into --grad-accum micro-batches. The global sample order is the world's
// (docs/data.md), so a heal that shrinks the group (set_world) skips no sample and reads none
// twice.
//
// Thread contract: the training thread's alone.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "ddpd/common/job_options.h"
#include "ddpd/core/communicator.h"
#include "train/token_data.h"

namespace ddpd::detail {

class Batches {
 public:
  // The samples of a model of `vocab_size` tokens, and `world` ranks' shares.
  Batches(const DdpJobOptions& options, int64_t vocab_size, int world);

  // The same global batch in `world` shares.
  void set_world(int world);
  int64_t local_batch() const { return local_batch_; }  // this rank's rows of each global batch
  bool has_eval() const { return eval_data_ != nullptr; }

  // Step `step`'s micro-batches of this rank (comm's), each [rows, context + 1] on its device.
  std::vector<torch::Tensor> micro_batches(int64_t step, const Communicator& comm) const;
  // This rank's rows of held-out batch `batch` (--eval-data's), on the device.
  torch::Tensor eval_rows(int64_t batch, const Communicator& comm) const;

 private:
  // [rows, context + 1] tokens: this rank's rows [first_row, first_row + rows) of global batch
  // `batch` of `samples`, on the device.
  torch::Tensor rows_of(const TokenSamples& samples, int64_t batch, int64_t first_row, int64_t rows,
                        const Communicator& comm) const;

  const DdpJobOptions& options_;
  std::unique_ptr<TokenSamples> data_;
  std::unique_ptr<TokenSamples> eval_data_;  // --eval-data
  int64_t local_batch_ = 0;
  int64_t micro_batch_ = 0;  // rows per forward/backward (local_batch / --grad-accum)
};

}  // namespace ddpd::detail
