// The CUDA build's side of device.h: one GPU per local rank, ProcessGroupNCCL, CUDA-event
// timelines and the caching allocator's statistics. Compiled only with a CUDA LibTorch
// (DDPD_WITH_CUDA); CI compiles and links it into build/cuda/bin (no GPU needed).
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <deque>
#include <mutex>
#include <stdexcept>
#include <string>

#include "device/device.h"

namespace ddpd::detail {
namespace {

// Thread contract: thread-safe (collectives launched from autograd's device thread record
// points too); one mutex guards the events. Points of an earlier anchor are refused.
class CudaTimeline : public Timeline {
 public:
  CudaTimeline(at::Device device, std::function<double()> clock)
      : device_(device), clock_(std::move(clock)) {}

  void anchor() override {
    std::lock_guard<std::mutex> lock(mutex_);
    anchor_locked();
  }

  TimePoint mark() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (events_.empty()) anchor_locked();
    return record_locked(c10::cuda::getCurrentCUDAStream(device_.index()));
  }

  TimePoint mark_completion(c10d::Work& work) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (events_.empty()) anchor_locked();
    // Work::wait makes the current stream wait for the collective's stream (without blocking
    // the host: NCCL_BLOCKING_WAIT=1 would make it block, and serialise overlapped buckets);
    // an event recorded after it on a side stream fires when the collective has finished,
    // without delaying the compute stream. Streams rotate through the pool, so one
    // collective's completion event never queues behind another's.
    auto stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device_.index());
    c10::cuda::CUDAStreamGuard guard(stream);
    work.wait();
    return record_locked(stream);
  }

  double seconds(const TimePoint& point) override {
    if (point.event < 0) return point.host_s;
    at::cuda::CUDAEvent* event = nullptr;
    at::cuda::CUDAEvent* reference = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      TORCH_CHECK(point.host_s == anchor_host_s_ && point.event < static_cast<int>(events_.size()),
                  "CudaTimeline: a time point from an earlier anchor");
      event = &events_[point.event];  // deque: stable while later points are recorded
      reference = &events_.front();
    }
    // Waiting outside the lock lets other threads record points meanwhile (anchor() is only
    // called by the thread that also reads points, so the events stay alive).
    event->synchronize();
    return point.host_s + reference->elapsed_time(*event) / 1e3;  // elapsed_time is ms
  }

  void synchronize() override {
    c10::cuda::CUDAGuard guard(device_);
    c10::cuda::device_synchronize();
  }

 private:
  void anchor_locked() {
    c10::cuda::CUDAGuard guard(device_);
    c10::cuda::device_synchronize();  // idle device: the reference event fires at once
    events_.clear();
    anchor_host_s_ = clock_();
    record_locked(c10::cuda::getCurrentCUDAStream(device_.index()));
  }

  TimePoint record_locked(const c10::cuda::CUDAStream& stream) {
    events_.emplace_back(cudaEventDefault);  // timing enabled (CUDAEvent's default disables it)
    events_.back().record(stream);
    return {anchor_host_s_, static_cast<int>(events_.size()) - 1};
  }

  at::Device device_;
  std::function<double()> clock_;
  std::mutex mutex_;
  std::deque<at::cuda::CUDAEvent> events_;  // events_[0] is the anchor
  double anchor_host_s_ = 0;
};

}  // namespace

bool cuda_build() { return true; }

int cuda_device_count() { return static_cast<int>(c10::cuda::device_count()); }

namespace {

// Throws std::invalid_argument unless `local_rank` has a GPU of its own here.
void require_gpu_of(int local_rank) {
  const int count = cuda_device_count();
  if (count == 0) {
    throw std::invalid_argument(
        "device: cuda: no CUDA device is available to this process (no GPU, no driver, or "
        "CUDA_VISIBLE_DEVICES hides them)");
  }
  if (local_rank >= count) {
    throw std::invalid_argument("LOCAL_RANK: " + std::to_string(local_rank) + " needs GPU " +
                                std::to_string(local_rank) + ", but this host has " +
                                std::to_string(count) + " (one GPU per local rank)");
  }
}

}  // namespace

at::Device bind_cuda_device(int local_rank) {
  require_gpu_of(local_rank);
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(local_rank));
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
}

int64_t cuda_free_memory_bytes(int local_rank) {
  require_gpu_of(local_rank);
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(local_rank));
  size_t free_bytes = 0, total_bytes = 0;
  C10_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return static_cast<int64_t>(free_bytes);
}

int64_t cuda_total_memory_bytes(int device) {
  require_gpu_of(device);
  cudaDeviceProp properties{};
  C10_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  return static_cast<int64_t>(properties.totalGlobalMem);
}

c10::intrusive_ptr<c10d::Backend> make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                  int rank, int world_size,
                                                  std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  // The NCCL watchdog aborts a collective that runs past it (every collective has a
  // timeout); waits in this process also stop at it.
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, options);
}

std::unique_ptr<Timeline> make_timeline(at::Device device, std::function<double()> host_clock) {
  if (device.is_cuda()) return std::make_unique<CudaTimeline>(device, std::move(host_clock));
  return make_host_timeline(std::move(host_clock));
}

AllocatorStats cuda_allocator_stats(at::Device device) {
  if (!device.is_cuda()) throw std::logic_error("cuda_allocator_stats: not a CUDA device");
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  constexpr auto kAggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  const auto& allocated = stats.allocated_bytes[kAggregate];
  const auto& reserved = stats.reserved_bytes[kAggregate];
  return {allocated.current, allocated.peak, reserved.current, reserved.peak};
}

void reset_cuda_peak_stats(at::Device device) {
  if (!device.is_cuda()) throw std::logic_error("reset_cuda_peak_stats: not a CUDA device");
  c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
}

nlohmann::json cuda_memory_snapshot() {
  nlohmann::json segments = nlohmann::json::array();
  for (const auto& segment : c10::cuda::CUDACachingAllocator::snapshot().segments) {
    nlohmann::json blocks = nlohmann::json::array();
    for (const auto& block : segment.blocks) {
      blocks.push_back({{"size", static_cast<int64_t>(block.size)},
                        {"allocated", block.allocated},
                        {"active", block.active}});
    }
    segments.push_back({{"device", static_cast<int64_t>(segment.device)},
                        {"address", static_cast<int64_t>(segment.address)},
                        {"total_size", static_cast<int64_t>(segment.total_size)},
                        {"allocated_size", static_cast<int64_t>(segment.allocated_size)},
                        {"active_size", static_cast<int64_t>(segment.active_size)},
                        {"is_large", segment.is_large},
                        {"blocks", std::move(blocks)}});
  }
  return {{"segments", std::move(segments)}};
}

bool supports_bf16(at::Device device) {
  if (device.is_cpu()) return true;
  return at::cuda::getDeviceProperties(device.index())->major >= 8;  // Ampere and later
}

}  // namespace ddpd::detail
