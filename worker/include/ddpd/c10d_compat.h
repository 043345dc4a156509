// The one place where LibTorch 1.13 (Debian bookworm) and 2.x differ for this project: the
// class collectives are called on, the autocast switches and, in CUDA builds, the caching
// allocator's statistics and snapshot. Everything else in c10d that the core uses (Work, Store,
// TCPStoreOptions, the collective option structs, ProcessGroupGloo/NCCL and their Options'
// create() and timeout) reads the same in both; 2.x only adds fields with defaults.
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/version.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif

#define DDPD_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||       \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace ddpd::compat {

// 1.13: ProcessGroupGloo and ProcessGroupNCCL derive from c10d::ProcessGroup. 2.x: they derive
// from c10d::Backend, and ProcessGroup became a dispatching front over backends. Both bases
// declare the same virtual collectives (allreduce, broadcast, allgather, send, recv, barrier
// with their option structs), which are all the core calls, so the core holds the backend.
#if TORCH_VERSION_MAJOR >= 2
using CollectiveBackend = c10d::Backend;
#else
using CollectiveBackend = c10d::ProcessGroup;
#endif

// Autocast on for `device` with `dtype` (or off). 2.4 replaced the per-device functions
// (set_enabled / set_cpu_enabled, set_autocast_gpu_dtype / set_autocast_cpu_dtype) with ones
// taking the device type, and deprecated the old ones.
inline void set_autocast(at::DeviceType device, bool enabled, at::ScalarType dtype) {
#if DDPD_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(device, enabled);
  if (enabled) at::autocast::set_autocast_dtype(device, dtype);
#else
  if (device == at::kCUDA) {
    at::autocast::set_enabled(enabled);
    if (enabled) at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_cpu_enabled(enabled);
    if (enabled) at::autocast::set_autocast_cpu_dtype(dtype);
  }
#endif
  if (!enabled) at::autocast::clear_cache();
}

}  // namespace ddpd::compat

#if defined(DDPD_WITH_CUDA)
#include <c10/cuda/CUDACachingAllocator.h>

#include <vector>

namespace ddpd::compat {

// The aggregate entry of one of DeviceStats' per-pool arrays. 2.5 moved StatType out of
// c10::cuda::CUDACachingAllocator, but AGGREGATE is entry 0 in every version.
template <typename StatArray>
const auto& aggregate(const StatArray& per_pool) {
  return per_pool[0];
}

// The caching allocator's segments: 1.13 returns them; 2.x wraps them in SnapshotInfo.
inline std::vector<c10::cuda::CUDACachingAllocator::SegmentInfo> allocator_segments() {
#if TORCH_VERSION_MAJOR >= 2
  return c10::cuda::CUDACachingAllocator::snapshot().segments;
#else
  return c10::cuda::CUDACachingAllocator::snapshot();
#endif
}

}  // namespace ddpd::compat
#endif  // DDPD_WITH_CUDA
