// The CPU build's side of device.h: host clock, no CUDA, autocast on CPU only.
#include <stdexcept>

#include "device/device.h"

namespace ddpd::detail {
namespace {

const char* const kNeedsCuda =
    "needs a CUDA build of ddpd (this build's LibTorch is CPU-only); use gloo / cpu";

}  // namespace

bool cuda_build() { return false; }
int cuda_device_count() { return 0; }

int64_t cuda_free_memory_bytes(int) {
  throw std::invalid_argument(std::string("backend: nccl ") + kNeedsCuda);
}

int64_t cuda_total_memory_bytes(int) {
  throw std::invalid_argument(std::string("backend: nccl ") + kNeedsCuda);
}

at::Device bind_cuda_device(int) {
  throw std::invalid_argument(std::string("backend: nccl ") + kNeedsCuda);
}

c10::intrusive_ptr<c10d::Backend> make_nccl_group(const c10::intrusive_ptr<c10d::Store>&, int, int,
                                                  std::chrono::milliseconds) {
  throw std::invalid_argument(std::string("backend: nccl ") + kNeedsCuda);
}

std::unique_ptr<Timeline> make_timeline(at::Device device, std::function<double()> host_clock) {
  // Any device but CUDA runs on the host clock (the meta device of the collective-device test).
  if (device.is_cuda()) throw std::invalid_argument(std::string("device: cuda ") + kNeedsCuda);
  return make_host_timeline(std::move(host_clock));
}

AllocatorStats cuda_allocator_stats(at::Device) {
  throw std::logic_error("cuda_allocator_stats: no CUDA in this build");
}

void reset_cuda_peak_stats(at::Device) {
  throw std::logic_error("reset_cuda_peak_stats: no CUDA in this build");
}

nlohmann::json cuda_memory_snapshot() {
  throw std::invalid_argument(std::string("--cuda-memory-snapshot ") + kNeedsCuda);
}

bool supports_bf16(at::Device device) { return device.is_cpu(); }

}  // namespace ddpd::detail
