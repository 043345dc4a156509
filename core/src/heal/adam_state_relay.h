// AdamW's state through fsdp's relayout (GradientSynchronizer::relayout, shrinking in place):
// each old piece's step and moments are read from this rank's optimizers (its own shard's and
// its copy's), and each new piece's written into new state, which replaces the optimizers' state
// and parameters once every unit is laid out (adopt()). Until then the optimizers keep their old
// parameters, so no old piece's memory is reused by a new one while its key is in a state map.
#pragma once

#include <torch/torch.h>

#include <type_traits>
#include <utility>
#include <vector>

#include "ddpd/core/grad_sync.h"

namespace ddpd::detail {

class AdamStateRelay final : public ShardStateRelay {
 public:
  // `replica`: the optimizer of the copy of the predecessor's shards.
  AdamStateRelay(torch::optim::Optimizer& own, torch::optim::Optimizer& replica);

  int channels() const override { return 2; }  // exp_avg, exp_avg_sq
  int64_t read(const torch::Tensor& piece, bool own,
               const std::vector<torch::Tensor>& out) override;
  void drop(const torch::Tensor& piece, bool own) override;
  void write(const torch::Tensor& piece, bool own, std::vector<torch::Tensor> values,
             int64_t step) override;

  // The optimizers step `own` and `replica` (the synchroniser's new optimizer and replica
  // parameters) with the state written.
  void adopt(const std::vector<torch::Tensor>& own, const std::vector<torch::Tensor>& replica);

 private:
  using StateMap =
      std::remove_reference_t<decltype(std::declval<torch::optim::Optimizer&>().state())>;
  torch::optim::Optimizer& optimizer(bool own) { return own ? own_ : replica_; }

  torch::optim::Optimizer& own_;
  torch::optim::Optimizer& replica_;
  StateMap next_own_;
  StateMap next_replica_;
};

}  // namespace ddpd::detail
