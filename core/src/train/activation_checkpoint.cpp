#include "train/activation_checkpoint.h"

#include <ATen/autocast_mode.h>

#include <atomic>

#include "device/counting_allocator.h"

namespace ddpd::detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::atomic<int64_t> max_rise{0};

void note_rise(int64_t rise) {
  int64_t seen = max_rise.load(std::memory_order_relaxed);
  while (rise > seen && !max_rise.compare_exchange_weak(seen, rise, std::memory_order_relaxed)) {
  }
}

// What backward needs besides the inputs: the segment and the autocast state it ran under (the
// trainer's AutocastScope has ended by the time backward runs; bf16 must recompute in bf16).
struct Recompute : torch::CustomClassHolder {
  Segment segment;  // a copy: the caller's may be gone by backward
  c10::DeviceType device = c10::DeviceType::CPU;
  bool autocast = false;
  at::ScalarType autocast_dtype = at::kBFloat16;
};

// Autocast's cast cache off for a scope. The cache keys a weight's bf16 copy by the weight and
// keeps it until the outermost AutocastScope ends: a copy cast in the checkpointed forward (grad
// off) has no autograd history, and one cast in the recompute (after every AutocastScope ended)
// would outlive backward and hand the next step the weights before AdamW's update. Either way
// bf16 checkpointing lost bitwise equality (step 1's loss 4.7850, not 4.7845, 2 layers); each
// segment casts each weight once, so nothing is lost by casting without the cache.
class AutocastCacheOff {
 public:
  AutocastCacheOff() : was_(at::autocast::is_autocast_cache_enabled()) {
    at::autocast::set_autocast_cache_enabled(false);
  }
  ~AutocastCacheOff() { at::autocast::set_autocast_cache_enabled(was_); }
  AutocastCacheOff(const AutocastCacheOff&) = delete;
  AutocastCacheOff& operator=(const AutocastCacheOff&) = delete;

 private:
  bool was_;
};

// Sets autocast on `device` for a scope, then puts back what was there.
class AutocastAs {
 public:
  AutocastAs(c10::DeviceType device, bool enabled, at::ScalarType dtype)
      : device_(device),
        was_enabled_(at::autocast::is_autocast_enabled(device)),
        was_dtype_(at::autocast::get_autocast_dtype(device)) {
    at::autocast::set_autocast_enabled(device_, enabled);
    at::autocast::set_autocast_dtype(device_, dtype);
  }
  ~AutocastAs() {
    at::autocast::set_autocast_enabled(device_, was_enabled_);
    at::autocast::set_autocast_dtype(device_, was_dtype_);
  }
  AutocastAs(const AutocastAs&) = delete;
  AutocastAs& operator=(const AutocastAs&) = delete;

 private:
  c10::DeviceType device_;
  bool was_enabled_;
  at::ScalarType was_dtype_;
};

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  // Function::apply runs this with grad mode off: the segment's intermediates are freed as it
  // goes, only the inputs are saved.
  static torch::Tensor forward(AutogradContext* ctx, at::TensorList inputs,
                               const Segment& segment) {
    auto recompute = c10::make_intrusive<Recompute>();
    recompute->segment = segment;
    recompute->device = inputs.front().device().type();
    recompute->autocast = at::autocast::is_autocast_enabled(recompute->device);
    recompute->autocast_dtype = at::autocast::get_autocast_dtype(recompute->device);
    ctx->saved_data["recompute"] = c10::IValue::make_capsule(recompute);
    ctx->save_for_backward(inputs.vec());
    AutocastCacheOff no_cast_cache;
    return segment(inputs.vec());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto recompute =
        c10::static_intrusive_pointer_cast<Recompute>(ctx->saved_data["recompute"].toCapsule());
    std::vector<torch::Tensor> inputs;
    for (const auto& saved : ctx->get_saved_variables()) {
      inputs.push_back(saved.detach().requires_grad_(saved.requires_grad()));
    }
    torch::Tensor output;
    const int64_t live_before = live_cpu_tensor_bytes();
    {
      torch::AutoGradMode grad_on(true);
      AutocastAs autocast(recompute->device, recompute->autocast, recompute->autocast_dtype);
      AutocastCacheOff no_cast_cache;
      output = recompute->segment(inputs);
    }
    note_rise(live_cpu_tensor_bytes() - live_before);
    torch::autograd::backward({output}, {grad_outputs.at(0)});
    variable_list grads;
    for (const auto& input : inputs) grads.push_back(input.grad());
    grads.emplace_back();  // the segment: not a tensor
    return grads;
  }
};

}  // namespace

void reset_recompute_rise() { max_rise.store(0, std::memory_order_relaxed); }
int64_t max_recompute_rise_bytes() { return max_rise.load(std::memory_order_relaxed); }

torch::Tensor checkpointed(const Segment& segment, const std::vector<torch::Tensor>& inputs) {
  bool any_requires_grad = false;
  for (const auto& input : inputs) any_requires_grad |= input.requires_grad();
  if (!torch::GradMode::is_enabled() || !any_requires_grad) return segment(inputs);
  return CheckpointFunction::apply(at::TensorList(inputs), segment);
}

}  // namespace ddpd::detail
