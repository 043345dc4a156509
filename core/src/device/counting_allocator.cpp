#include "device/counting_allocator.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <cstring>
#include <mutex>

namespace ddpd::detail {
namespace {

std::atomic<int64_t> g_live{0};
std::atomic<int64_t> g_peak{0};

void raise_peak(int64_t live) {
  int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (live > peak && !g_peak.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
}

// Each allocation carries its byte count in a header just before the data, so the DataPtr is a
// "simple" one (context == data) with one static deleter, as LibTorch's own CPU allocator's are:
// code that calls Allocator::raw_allocate()/raw_deallocate() (oneDNN's bf16 matmuls) asserts
// both, and a per-allocation context object failed there (`dptr.get() == dptr.get_context()`).
// 64 bytes keep the data at the alignment c10::alloc_cpu gives (gAlignment, 64).
constexpr size_t kHeaderBytes = 64;

c10::DeleterFnPtr g_inner_raw_deleter = nullptr;  // set once, before the allocator is installed

void delete_counted(void* data) {
  if (data == nullptr) return;
  void* block = static_cast<char*>(data) - kHeaderBytes;
  int64_t bytes = 0;
  std::memcpy(&bytes, block, sizeof bytes);
  g_live.fetch_sub(bytes, std::memory_order_relaxed);
  g_inner_raw_deleter(block);
}

// Needs an inner allocator with a raw deleter (c10's default CPU allocator has one).
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* inner) : inner_(inner) {}

  c10::DataPtr allocate(size_t n) override {
    if (n == 0) return {nullptr, nullptr, &delete_counted, c10::Device(c10::kCPU)};
    void* block = inner_->raw_allocate(n + kHeaderBytes);
    const auto bytes = static_cast<int64_t>(n);
    std::memcpy(block, &bytes, sizeof bytes);
    void* data = static_cast<char*>(block) + kHeaderBytes;
    raise_peak(g_live.fetch_add(bytes, std::memory_order_relaxed) + bytes);
    return {data, data, &delete_counted, c10::Device(c10::kCPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &delete_counted; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    inner_->copy_data(dest, src, count);
  }

 private:
  c10::Allocator* inner_;
};

}  // namespace

void install_counting_cpu_allocator() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Leaked on purpose: tensors freed at exit (statics, other threads) still call into it.
    c10::Allocator* inner = c10::GetCPUAllocator();
    g_inner_raw_deleter = inner->raw_deleter();
    if (g_inner_raw_deleter == nullptr) return;  // an allocator we cannot wrap: nothing counted
    static auto* allocator = new CountingAllocator(inner);
    // The default CPU allocator registers at priority 0; a higher one keeps ours installed.
    c10::SetCPUAllocator(allocator, /*priority=*/100);
  });
}

int64_t live_cpu_tensor_bytes() { return g_live.load(std::memory_order_relaxed); }

int64_t peak_cpu_tensor_bytes() { return g_peak.load(std::memory_order_relaxed); }

void reset_cpu_tensor_peak() {
  g_peak.store(g_live.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

}  // namespace ddpd::detail
