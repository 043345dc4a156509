#include "comm/gloo_fallbacks.h"

#include <vector>

namespace ddpd::detail {

c10::intrusive_ptr<c10d::Work> list_all_gather(c10d::Backend& group, at::Tensor& output,
                                               const at::Tensor& flat_input, int world_size,
                                               std::chrono::milliseconds timeout) {
  const int64_t chunk = flat_input.numel();
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int r = 0; r < world_size; ++r) outputs[0].push_back(output.narrow(0, r * chunk, chunk));
  std::vector<at::Tensor> inputs{flat_input};
  c10d::AllgatherOptions options;
  options.timeout = timeout;
  return group.allgather(outputs, inputs, options);
}

}  // namespace ddpd::detail
