#include "device/storage_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

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

void make_resident(const torch::Tensor& tensor) {
  // An unallocated tensor (unallocated_tensor) has elements but no memory.
  if (!tensor.device().is_cpu() || tensor.nbytes() == 0 || !tensor.data_ptr()) return;
#ifndef MADV_POPULATE_WRITE
  constexpr int MADV_POPULATE_WRITE = 23;  // Linux 5.14; older headers lack it
#endif
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  auto* first = static_cast<char*>(tensor.data_ptr());
  char* const end = first + tensor.nbytes();
  // madvise takes whole pages: the partial pages at either end are touched below.
  auto* from =
      reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(first) + page - 1) & ~(page - 1));
  auto* to = reinterpret_cast<char*>(reinterpret_cast<uintptr_t>(end) & ~(page - 1));
  const bool populated = from < to && ::madvise(from, to - from, MADV_POPULATE_WRITE) == 0;
  auto touch = [](char* byte) {
    volatile char* b = byte;
    *b = *b;
  };
  if (populated) {
    if (first < from) touch(first);
    if (to < end) touch(to);
    return;
  }
  for (char* byte = first; byte < end;
       byte = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(byte) + page) & ~(page - 1))) {
    touch(byte);
  }
}

}  // namespace ddpd::detail
