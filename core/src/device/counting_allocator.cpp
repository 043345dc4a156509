#include "device/counting_allocator.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <atomic>
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

// What the wrapped allocation's deleter needs: the inner DataPtr (its own deleter and context)
// and the bytes to take off. One small heap object per tensor allocation: measured below 1 % of
// a step (docs/metrics.md#memory).
struct Counted {
  c10::DataPtr inner;
  int64_t bytes;
};

void delete_counted(void* context) {
  auto* counted = static_cast<Counted*>(context);
  g_live.fetch_sub(counted->bytes, std::memory_order_relaxed);
  delete counted;  // runs the inner deleter
}

class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* inner) : inner_(inner) {}

  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr inner = inner_->allocate(n);
    void* data = inner.get();
    const c10::Device device = inner.device();
    auto* counted = new Counted{std::move(inner), static_cast<int64_t>(n)};
    raise_peak(g_live.fetch_add(counted->bytes, std::memory_order_relaxed) + counted->bytes);
    return {data, counted, &delete_counted, device};
  }

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
    static auto* allocator = new CountingAllocator(c10::GetCPUAllocator());
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
