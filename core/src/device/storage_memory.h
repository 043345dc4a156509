// Host memory, and when it becomes resident. Tensors whose storage holds no memory for a while:
// fsdp's full parameters between gathers, and the parameters of a model built with
// ParameterMemory::kUnallocated until fsdp gives each rank its shard. The storage object stays, so
// every view of it (module parameters, tensors autograd saved) sees the memory allocate_storage()
// gives back. Reading such a tensor before then is undefined: its data pointer is null.
#pragma once

#include <torch/torch.h>

namespace ddpd::detail {

// Gives the storage's memory back to its allocator.
void free_storage(const torch::Tensor& tensor);
// Allocates numel × element size bytes for the storage, uninitialised.
void allocate_storage(const torch::Tensor& tensor);
// A tensor of `sizes` and `options` whose storage holds no memory. The allocation it frees is
// never written, so it never became resident.
torch::Tensor unallocated_tensor(at::IntArrayRef sizes, const torch::TensorOptions& options);

// Faults in every page of a contiguous host tensor's memory ahead of a write into it, keeping its
// bytes (no other thread may write them meanwhile); nothing for a tensor on a device. Memory from a
// fresh allocation is first touched page by page by whatever writes it: copying 1.5 GB into it took
// 0.95 s on the 2-core development host, and 0.36 + 0.15 s with the pages faulted in first by the
// kernel (MADV_POPULATE_WRITE; before Linux 5.14, one byte of every page read and written back, at
// the cost of the faults).
void make_resident(const torch::Tensor& tensor);

}  // namespace ddpd::detail
