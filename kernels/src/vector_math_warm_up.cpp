#include "ddpd/kernels/vector_math_warm_up.h"

#include <torch/torch.h>

#include <mutex>

namespace ddpd::kernels {
namespace {

// Every op LibTorch sends to VML for float and double (aten/src/ATen/cpu/vml.h), and a few that
// other releases send there: warming one that does not use VML costs a microsecond.
void call_each_unary_op(const torch::Tensor& x) {
  (void)x.acos(), (void)x.asin(), (void)x.atan(), (void)x.cos(), (void)x.sin(), (void)x.tan();
  (void)x.tanh(), (void)x.erf(), (void)x.erfc(), (void)x.erfinv(), (void)x.exp();
  (void)x.expm1(), (void)x.log(), (void)x.log10(), (void)x.log1p(), (void)x.log2();
  (void)x.sqrt(), (void)x.rsqrt(), (void)x.trunc(), (void)x.lgamma(), (void)x.sigmoid();
}

}  // namespace

void warm_up_vector_math() {
  static std::once_flag once;
  std::call_once(once, [] {
    const torch::NoGradGuard no_grad;
    for (const auto dtype : {torch::kFloat32, torch::kFloat64}) {
      call_each_unary_op(torch::full({1}, 0.5, torch::TensorOptions().dtype(dtype)));
    }
  });
}

}  // namespace ddpd::kernels
