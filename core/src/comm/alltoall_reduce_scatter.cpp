#include "comm/gloo_fallbacks.h"

#include <vector>

namespace ddpd::detail {

AllToAllReduceScatter alltoall_reduce_scatter(c10d::Backend& group, const at::Tensor& flat_input,
                                              int world_size, int64_t chunk,
                                              std::chrono::milliseconds timeout) {
  AllToAllReduceScatter out;
  out.received = at::empty({world_size, chunk}, flat_input.options());
  c10d::AllToAllOptions options;
  options.timeout = timeout;
  std::vector<int64_t> equal_splits;  // empty: N equal chunks
  at::Tensor received_flat = out.received.view({-1});
  at::Tensor input = flat_input;
  out.work = group.alltoall_base(received_flat, input, equal_splits, equal_splits, options);
  return out;
}

}  // namespace ddpd::detail
