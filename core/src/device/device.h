// What differs between the CPU and the CUDA build of the training core. CMake compiles exactly
// one implementation: device_cpu.cpp, or cuda/device_cuda.cpp when it finds a CUDA LibTorch
// (DDPD_WITH_CUDA). Callers never test the build themselves; they ask these functions.
#pragma once

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <functional>
#include <memory>

#include <ATen/autocast_mode.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

namespace c10d {
class Store;
}

namespace ddpd::detail {

// True in a build with a CUDA LibTorch (NCCL, CUDA tensors, CUDA events).
bool cuda_build();
// CUDA devices this process can see; 0 in a CPU build.
int cuda_device_count();

// The GPU of `local_rank` (torchrun's convention: one GPU per local rank), made current for
// this process. Throws std::invalid_argument ("backend: ...") in a CPU build or when the host
// has fewer GPUs than local_rank + 1.
at::Device bind_cuda_device(int local_rank);

// Free memory of the GPU of `local_rank`, bytes (cudaMemGetInfo): what a CUDA job's memory
// admission compares its estimate with. Throws std::invalid_argument as bind_cuda_device does.
int64_t cuda_free_memory_bytes(int local_rank);

// Total memory of GPU `device`, bytes (cudaGetDeviceProperties, which makes no context).
// Throws std::invalid_argument as bind_cuda_device does.
int64_t cuda_total_memory_bytes(int device);

// ProcessGroupNCCL over `store` on the current device, every collective bounded by `timeout`.
// Throws std::invalid_argument in a CPU build.
c10::intrusive_ptr<c10d::Backend> make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                  int rank, int world_size,
                                                  std::chrono::milliseconds timeout);

// A point in time on `device`'s work queue. On CPU it is the host clock when taken; on CUDA an
// event recorded on a stream, read back once the device has passed it.
struct TimePoint {
  double host_s = 0;  // the host clock (CPU), or the anchor's host time (CUDA)
  int event = -1;     // CUDA event index in the timeline; -1 on CPU
};

// Thread contract: one thread (the one driving training or the benchmark) calls every method.
// Times are seconds on the host clock passed in (the communicator's), so host phases, device
// phases and collectives share one axis.
class Timeline {
 public:
  virtual ~Timeline() = default;
  // Starts a step: on CUDA, waits for the device to be idle and records the reference event at
  // the current host time; later points are measured from it on the device.
  virtual void anchor() = 0;
  // Now, in stream order on the current stream.
  virtual TimePoint mark() = 0;
  // When `work` completes on the device (CUDA: an event after the collective's stream). On CPU
  // completion is timed by the caller (the work's future), so this is not called.
  virtual TimePoint mark_completion(c10d::Work& work) = 0;
  // The point's time on the host clock; waits until the device has passed it.
  virtual double seconds(const TimePoint& point) = 0;
  // Blocks the host until all queued device work is done (no-op on CPU).
  virtual void synchronize() = 0;
};

// Host-clock timeline for CPU devices; CUDA-event timeline for CUDA devices.
std::unique_ptr<Timeline> make_timeline(at::Device device, std::function<double()> host_clock);
// The host-clock timeline (both builds; timeline_host.cpp).
std::unique_ptr<Timeline> make_host_timeline(std::function<double()> host_clock);

// Caching-allocator figures of a CUDA device, bytes.
struct AllocatorStats {
  int64_t allocated = 0;
  int64_t peak_allocated = 0;
  int64_t reserved = 0;
  int64_t peak_reserved = 0;
};
// Throws std::logic_error for a CPU device.
AllocatorStats cuda_allocator_stats(at::Device device);
// Starts the peak figures of cuda_allocator_stats afresh (std::logic_error for a CPU device).
void reset_cuda_peak_stats(at::Device device);
// The caching allocator's segments and blocks (sizes and states), as JSON.
nlohmann::json cuda_memory_snapshot();
// `--cuda-memory-snapshot PATH`: writes cuda_memory_snapshot() to PATH (PATH.rankR when
// world_size > 1). Throws std::runtime_error when the file cannot be written.
void write_cuda_memory_snapshot(const std::string& path, int rank, int world_size);

// bf16 autocast on `device` for the lifetime of the scope (forward and loss; FP32 weights).
class AutocastScope {
 public:
  AutocastScope(at::Device device, bool enabled) : type_(device.type()), enabled_(enabled) {
    if (!enabled_) return;
    at::autocast::set_autocast_enabled(type_, true);
    at::autocast::set_autocast_dtype(type_, at::kBFloat16);
  }
  ~AutocastScope() {
    if (!enabled_) return;
    at::autocast::set_autocast_enabled(type_, false);
    at::autocast::clear_cache();
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  at::DeviceType type_;
  bool enabled_;
};
// Whether `device` computes in bf16 (every CPU; CUDA compute capability 8.0 and later).
bool supports_bf16(at::Device device);

}  // namespace ddpd::detail
