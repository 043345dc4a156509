#include "train/batches.h"

namespace ddpd::detail {

Batches::Batches(const DdpJobOptions& options, int64_t vocab_size, int world)
    : options_(options),
      data_(std::make_unique<TokenSamples>(training_source(options), options.context_length,
                                           vocab_size, options.seed + 1)) {
  if (!options.eval_data.empty()) {
    eval_data_ = std::make_unique<TokenSamples>(eval_source(options), options.context_length,
                                                vocab_size, options.seed + 2);
  }
  set_world(world);
}

void Batches::set_world(int world) {
  local_batch_ = options_.batch_size / world;
  micro_batch_ = local_batch_ / options_.grad_accum;
}

std::vector<torch::Tensor> Batches::micro_batches(int64_t step, const Communicator& comm) const {
  std::vector<torch::Tensor> micro(options_.grad_accum);
  for (int64_t k = 0; k < options_.grad_accum; ++k) {
    micro[k] = rows_of(*data_, step, k * micro_batch_, micro_batch_, comm);
  }
  return micro;
}

torch::Tensor Batches::eval_rows(int64_t batch, const Communicator& comm) const {
  return rows_of(*eval_data_, batch, 0, local_batch_, comm);
}

torch::Tensor Batches::rows_of(const TokenSamples& samples, int64_t batch, int64_t first_row,
                               int64_t rows, const Communicator& comm) const {
  return samples
      .samples(batch * options_.batch_size + comm.info().rank * local_batch_ + first_row, rows)
      .to(comm.info().device);
}

}  // namespace ddpd::detail
