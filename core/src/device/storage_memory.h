// Tensors whose storage holds no memory for a while: fsdp's full parameters between gathers, and
// the parameters of a model built with ParameterMemory::kUnallocated until fsdp gives each rank
// its shard. The storage object stays, so every view of it (module parameters, tensors autograd
// saved) sees the memory allocate_storage() gives back. Reading such a tensor before then is
// undefined: its data pointer is null.
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

}  // namespace ddpd::detail
