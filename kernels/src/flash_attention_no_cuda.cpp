// The CPU binaries' side of flash_attention_cuda_op.h: they link no CUDA LibTorch, so no tensor
// is ever a CUDA one and the CUDA kernels take nothing.
#include <stdexcept>

#include "flash_attention_cuda_op.h"

namespace ddpd::kernels {

bool cuda_kernels_take(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&) {
  return false;
}

torch::Tensor flash_attention_cuda(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                   bool) {
  throw std::logic_error("flash_attention_cuda: this binary is not a CUDA build of ddpd");
}

}  // namespace ddpd::kernels
