#include "train/evaluation.h"

#include "device/device.h"

namespace ddpd::detail {

double evaluate(const DdpJobOptions& options, TransformerLMImpl& model, GradientSynchronizer& sync,
                Communicator& comm, const Batches& batches) {
  torch::NoGradGuard no_grad;
  sync.prepare_forward();
  // Summed in float64: the float64 verification runs compare eval_loss with transformers'.
  torch::Tensor total = torch::zeros({1}, torch::kFloat64).to(comm.info().device);
  const int64_t context = options.context_length;
  for (int64_t b = 0; b < options.eval_batches; ++b) {
    const torch::Tensor rows = batches.eval_rows(b, comm);
    AutocastScope autocast(comm.info().device, options.precision == Precision::kBf16);
    total +=
        language_model_loss(model.forward(rows.narrow(1, 0, context)), rows.narrow(1, 1, context))
            .to(torch::kFloat64);
  }
  sync.end_forward_only();
  comm.all_reduce_sum(total, "all_reduce/eval_loss").wait();
  return total.item<double>() / static_cast<double>(options.eval_batches * comm.info().world_size);
}

}  // namespace ddpd::detail
