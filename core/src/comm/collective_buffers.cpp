#include "ddpd/core/collective_buffers.h"

#include "comm/shared_memory_capability.h"

namespace ddpd {

at::Tensor allocate_collective_buffer(Communicator& comm, int64_t numel,
                                      const at::TensorOptions& options) {
  if (comm.shared_memory() != nullptr && options.device().is_cpu()) {
    return comm.shared_memory()->allocate_shared(numel, options);
  }
  return at::zeros({numel}, options);
}

bool reads_in_place(const Communicator& comm, const at::Tensor& tensor) {
  return comm.shared_memory() != nullptr && tensor.is_contiguous() &&
         comm.shared_memory()->is_shared(tensor);
}

std::optional<SharedBufferFallback> shared_buffer_fallback(const Communicator& comm) {
  return comm.shared_memory() != nullptr ? comm.shared_memory()->last_shared_fallback()
                                         : std::nullopt;
}

}  // namespace ddpd
