#include "comm/predecessor_keeping_reduce_scatter.h"

#include <stdexcept>

#include "comm/communicator_internals.h"
#include "comm/decorating_backend.h"
#include "comm/shared_memory_capability.h"

namespace ddpd {

bool reduce_scatter_keeps_predecessor(const Communicator& comm) {
  return comm.shared_memory() != nullptr && comm.info().world_size > 1;
}

PendingReduceScatter reduce_scatter_sum_keeping_predecessor_async(Communicator& comm,
                                                                  at::Tensor& output,
                                                                  at::Tensor& predecessor_output,
                                                                  const at::Tensor& input,
                                                                  const std::string& name) {
  using detail::CommunicatorAccess;
  if (!reduce_scatter_keeps_predecessor(comm)) {
    throw std::logic_error(name + ": this group's transport (" +
                           std::string(enum_name(comm.info().transport)) +
                           ") cannot keep the predecessor's sum in its reduce-scatter");
  }
  CommunicatorAccess::require_on_device(comm, input, name);
  CommunicatorAccess::require_on_device(comm, output, name);
  CommunicatorAccess::require_on_device(comm, predecessor_output, name);
  at::Tensor flat_input = input.contiguous();
  detail::SharedMemoryCapability& shared_memory = *comm.shared_memory();
  PendingCollective exchange = CommunicatorAccess::launch(
      comm, Collective::kReduceScatter, name, flat_input, flat_input.nbytes(),
      [&](c10d::Backend& group) {
        // The wrappers see it as c10d's reduce-scatter (comm/decorating_backend.h).
        return detail::launch_through_wrappers(
            group, {"reduce_scatter", flat_input.numel(), flat_input.scalar_type()}, [&] {
              return shared_memory.reduce_scatter_keeping_predecessor(output, predecessor_output,
                                                                      flat_input);
            });
      },
      {flat_input, output, predecessor_output});
  return CommunicatorAccess::reduce_scatter(std::move(exchange));
}

}  // namespace ddpd
