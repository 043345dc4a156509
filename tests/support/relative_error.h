// How far a tensor is from a reference, for the tests and benchmarks of the attention kernels.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>

namespace ddpd::testing {

// max |got - reference| / max(floor, max |reference|), in float64. A floor of 1 measures small
// references absolutely.
inline double relative_error(const at::Tensor& got, const at::Tensor& reference,
                             double floor = 0.0) {
  const at::Tensor exact = reference.to(at::kDouble);
  return (got.to(at::kDouble) - exact).abs().max().item<double>() /
         std::max(floor, exact.abs().max().item<double>());
}

}  // namespace ddpd::testing
