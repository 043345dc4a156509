#include "device/storage_memory.h"

namespace ddpd::detail {

void free_storage(const torch::Tensor& tensor) {
  c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, tensor.device()));
  storage->set_nbytes(0);
}

void allocate_storage(const torch::Tensor& tensor) {
  c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
  const size_t nbytes = tensor.numel() * tensor.element_size();
  storage->set_data_ptr_noswap(storage->allocator()->allocate(nbytes));
  storage->set_nbytes(nbytes);
}

torch::Tensor unallocated_tensor(at::IntArrayRef sizes, const torch::TensorOptions& options) {
  torch::Tensor tensor = torch::empty(sizes, options);
  free_storage(tensor);
  return tensor;
}

}  // namespace ddpd::detail
