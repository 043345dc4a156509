// fsdp's --shard-replicas over shm: a reduce-scatter that also leaves on each rank the sum its
// predecessor gets, within the same collective, so a rank's gradient shard has a replica on its
// successor at no extra phase. A free function over the Communicator's launch path
// (comm/communicator_internals.h) and the shm backend's capability
// (comm/shared_memory_capability.h), as the debug wrappers are backends around it: the
// Communicator itself knows nothing of it. Elsewhere (Gloo, NCCL) a caller shifts the sums
// around the ring itself (comm/ring_shift.h).
#pragma once

#include <ATen/ATen.h>

#include <string>

#include "ddpd/core/communicator.h"

namespace ddpd {

// Whether reduce_scatter_sum_keeping_predecessor_async runs on `comm`: over shm, at world > 1.
bool reduce_scatter_keeps_predecessor(const Communicator& comm);

// comm.reduce_scatter_sum_async that also leaves in `predecessor_output` (the output's shape)
// the sum rank (rank - 1) mod N gets in its output, bit for bit, within the same collective.
// Journaled, timed and waited for as the Communicator's own collectives; every tensor must be
// on its device. Throws std::logic_error unless reduce_scatter_keeps_predecessor(comm). All
// three tensors must stay alive until wait().
PendingReduceScatter reduce_scatter_sum_keeping_predecessor_async(Communicator& comm,
                                                                  at::Tensor& output,
                                                                  at::Tensor& predecessor_output,
                                                                  const at::Tensor& input,
                                                                  const std::string& name);

}  // namespace ddpd
