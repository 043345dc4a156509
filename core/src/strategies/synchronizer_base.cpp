#include "strategies/synchronizer_base.h"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "strategies/flat_buffer.h"

namespace ddpd {
namespace detail {

ReplicatedSynchronizer::ReplicatedSynchronizer(torch::nn::Module& model,
                                               std::shared_ptr<Communicator> comm,
                                               const SyncOptions& options)
    : model_(model),
      comm_(std::move(comm)),
      params_(unique_trainable_parameters(model)),
      options_(options) {
  for (const auto& [name, p] : named_unique_parameters(model)) {
    if (p.requires_grad()) param_names_.push_back(name);
  }
  TORCH_CHECK(param_names_.size() == params_.size(),
              "trainable parameter names and tensors differ");
  if (!options.joins_running_job && !options.same_initial_state) {
    broadcast_module_state(model_, *comm_);
  }
}

void ReplicatedSynchronizer::regroup(std::shared_ptr<Communicator> comm,
                                     const std::vector<int64_t>& /*launch_order*/) {
  comm_ = std::move(comm);
  // Gradients of the interrupted step may be in an old collective's hands: the next zero_grad
  // drops them, and its backward makes new ones.
  for (auto& p : params_) p.mutable_grad().reset();
}

void ReplicatedSynchronizer::check_every_gradient_ready(const std::vector<char>& ready) const {
  if (options_.find_unused_parameters) return;
  std::string names;
  int count = 0;
  for (size_t i = 0; i < ready.size(); ++i) {
    if (ready[i]) continue;
    if (count++ < 8) names += (names.empty() ? "'" : ", '") + param_names_[i] + "'";
  }
  if (count == 0) return;
  if (count > 8) names += " and " + std::to_string(count - 8) + " more";
  throw std::runtime_error(
      std::to_string(count) + " trainable parameter(s) got no gradient in this step's backward (" +
      names +
      "): the loss does not depend on them. Pass --find-unused-parameters to reduce them as "
      "zeros, or freeze them");
}

UnshardedPeak ReplicatedSynchronizer::step_peak_unsharded() const {
  UnshardedPeak peak;
  for (const auto& p : unique_parameters(model_)) peak.parameter_bytes += p.nbytes();
  for (const auto& p : params_) peak.gradient_bytes += p.nbytes();
  peak.total_bytes = peak.parameter_bytes + peak.gradient_bytes;
  peak.gradient_units = 1;
  return peak;
}

std::vector<size_t> ReplicatedSynchronizer::launch_order_from(const std::vector<int64_t>& saved,
                                                              bool& agreed) const {
  std::vector<char> seen(params_.size(), 0);
  agreed = !options_.static_buckets && saved.size() == params_.size();
  for (size_t k = 0; agreed && k < saved.size(); ++k) {
    agreed = saved[k] >= 0 && saved[k] < static_cast<int64_t>(params_.size()) && !seen[saved[k]];
    if (agreed) seen[saved[k]] = 1;
  }
  std::vector<size_t> order(params_.size());
  for (size_t k = 0; k < params_.size(); ++k) {
    order[k] = agreed ? static_cast<size_t>(saved[k]) : params_.size() - 1 - k;
  }
  return order;
}

std::vector<size_t> ReplicatedSynchronizer::agree_on_ready_order(
    const std::vector<size_t>& recorded) {
  std::vector<char> seen(params_.size(), 0);
  std::vector<int64_t> order;
  for (size_t i : recorded) {
    if (!seen.at(i)) order.push_back(static_cast<int64_t>(i));
    seen[i] = 1;
  }
  for (size_t k = params_.size(); k-- > 0;) {
    if (!seen[k]) order.push_back(static_cast<int64_t>(k));
  }
  // Every rank must launch in one order (c10d matches collectives by order); ranks whose
  // gradients became ready in another order take rank 0's.
  torch::Tensor agreed = torch::tensor(order, torch::kLong).to(comm_->info().device);
  comm_->broadcast(agreed, /*root=*/0, "broadcast/ready_order").wait();
  agreed = agreed.cpu();
  std::vector<size_t> out(params_.size());
  for (size_t k = 0; k < out.size(); ++k) out[k] = static_cast<size_t>(agreed[k].item<int64_t>());
  return out;
}

PendingGradientAverage::PendingGradientAverage(PendingCollective work, torch::Tensor gradient,
                                               torch::Tensor wire, double world_size)
    : work_(std::move(work)),
      gradient_(std::move(gradient)),
      wire_(std::move(wire)),
      world_size_(world_size) {}

void PendingGradientAverage::wait() {
  work_.wait();
  if (!gradient_.defined()) return;
  torch::NoGradGuard no_grad;
  if (wire_.defined()) {
    gradient_.copy_(wire_);  // already divided by N before the cast
  } else {
    gradient_.div_(world_size_);
  }
  gradient_ = torch::Tensor();
  wire_ = torch::Tensor();
}

PendingGradientAverage ReplicatedSynchronizer::average_async(torch::Tensor& gradient,
                                                             const std::string& name) {
  const double n = comm_->info().world_size;
  if (options_.gradient_wire == WireDtype::kFp32) {
    return {comm_->all_reduce_sum(gradient, name), gradient, {}, n};
  }
  torch::NoGradGuard no_grad;
  // Divide first: the sum of N halves stays in range where the sum of N gradients might not.
  torch::Tensor wire = gradient.div(n).to(
      options_.gradient_wire == WireDtype::kFp16 ? torch::kHalf : torch::kBFloat16);
  return {comm_->all_reduce_sum(wire, name), gradient, wire, n};
}

std::vector<torch::Tensor> ReplicatedSynchronizer::full_parameters() {
  return unique_parameters(model_);
}

namespace {

// World size 1: gradients are already the average over the one rank; nothing to send.
class LocalSynchronizer final : public ReplicatedSynchronizer {
 public:
  using ReplicatedSynchronizer::ReplicatedSynchronizer;
  std::string name() const override { return "none"; }
  void finish_gradient_synchronization() override {}
};

}  // namespace

GradReadyHooks::GradReadyHooks(const std::vector<torch::Tensor>& params,
                               std::function<void(size_t)> on_ready) {
  for (size_t i = 0; i < params.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(params[i]);
    TORCH_CHECK(accumulator, "parameter ", i, " has no gradient accumulator (not a leaf?)");
    keys_.push_back(
        accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
            [on_ready, i](const torch::autograd::variable_list& outputs,
                          const torch::autograd::variable_list&) {
              on_ready(i);
              return outputs;
            })));
    // The variable only holds its accumulator weakly; keep it (and so the hook) alive.
    accumulators_.push_back(std::move(accumulator));
  }
}

GradReadyHooks::~GradReadyHooks() {
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(keys_[i]);
}

}  // namespace detail

void broadcast_module_state(torch::nn::Module& module, Communicator& comm, int root,
                            int64_t chunk_bytes) {
  if (comm.info().world_size == 1) return;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> tensors = unique_parameters(module);
  for (const auto& b : module.buffers(/*recurse=*/true)) tensors.push_back(b);
  detail::broadcast_in_chunks(comm, tensors, root, "broadcast_module_state", chunk_bytes);
}

double parameter_spread(const std::vector<torch::Tensor>& parameters, Communicator& comm) {
  // Chunks of at most 1 Mi elements (4 MiB in fp32, twice that for max and min): a model-sized
  // copy here would be the largest temporary of the step's bookkeeping.
  constexpr int64_t kChunkElements = int64_t{1} << 20;
  torch::NoGradGuard no_grad;
  double spread = 0.0;
  std::vector<torch::Tensor> pieces;  // views making up the next chunk
  int64_t filled = 0;
  auto reduce_chunk = [&] {
    if (pieces.empty()) return;
    auto high = detail::flatten(pieces).to(torch::kFloat32);
    auto low = high.clone();
    comm.all_reduce(high, c10d::ReduceOp::MAX, "all_reduce/spread_max");
    comm.all_reduce(low, c10d::ReduceOp::MIN, "all_reduce/spread_min");
    spread = std::max(spread, (high - low).max().item<double>());
    pieces.clear();
    filled = 0;
  };
  for (const auto& p : parameters) {
    const auto flat = p.detach().reshape(-1);
    for (int64_t at = 0; at < flat.numel();) {
      const int64_t take = std::min(flat.numel() - at, kChunkElements - filled);
      pieces.push_back(flat.narrow(0, at, take));
      filled += take;
      at += take;
      if (filled == kChunkElements) reduce_chunk();
    }
  }
  reduce_chunk();
  return spread;
}

double parameter_spread(GradientSynchronizer& sync, Communicator& comm) {
  double spread = 0.0;
  sync.visit_full_parameters([&](const std::vector<torch::Tensor>& parameters) {
    spread = std::max(spread, parameter_spread(parameters, comm));
  });
  return spread;
}

std::vector<HeldRange> GradientSynchronizer::optimizer_parameter_ranges() {
  std::vector<HeldRange> ranges;
  for (const auto& p : optimizer_parameters()) ranges.push_back({0, p.numel()});
  return ranges;
}

WireDtype wire_dtype_of(GradCompression compression) {
  switch (compression) {
    case GradCompression::kFp16:
      return WireDtype::kFp16;
    case GradCompression::kBf16:
      return WireDtype::kBf16;
    default:
      return WireDtype::kFp32;
  }
}

ShardLayout shard_layout(int64_t numel, int world_size) {
  TORCH_CHECK(world_size >= 1, "world size must be >= 1");
  ShardLayout layout;
  layout.numel = numel;
  layout.shard_numel = (numel + world_size - 1) / world_size;
  layout.padded_numel = layout.shard_numel * world_size;
  return layout;
}

std::unique_ptr<GradientSynchronizer> make_synchronizer(torch::nn::Module& model,
                                                        std::shared_ptr<Communicator> comm,
                                                        const SyncOptions& options) {
  if (options.source && (options.strategy != Strategy::kFsdp || comm->info().world_size == 1 ||
                         !options.same_initial_state)) {
    throw std::invalid_argument(
        "SyncOptions::source is read by fsdp at world size > 1 only, with same_initial_state");
  }
  // The one world-size-1 substitution: with no peer, no strategy runs, and the synchroniser's
  // name() says so ("none") wherever the result reports which synchronisation ran.
  if (comm->info().world_size == 1) {
    return std::make_unique<detail::LocalSynchronizer>(model, std::move(comm));
  }
  switch (options.strategy) {
    case Strategy::kNaive:
      return detail::make_naive(model, std::move(comm), options);
    case Strategy::kFlat:
      return detail::make_flat(model, std::move(comm), options);
    case Strategy::kOverlap:
      return detail::make_overlap(model, std::move(comm), options);
    case Strategy::kBucketed:
      return detail::make_bucketed(model, std::move(comm), options);
    case Strategy::kFsdp:
      return detail::make_fsdp(model, std::move(comm), options);
  }
  throw std::invalid_argument("strategy: unknown value");
}

}  // namespace ddpd

namespace ddpd {
std::vector<int64_t> agreed_launch_order(GradientSynchronizer& sync) {
  const Regrouping* regrouping = sync.regrouping();
  return regrouping ? regrouping->launch_order() : std::vector<int64_t>{};
}

std::vector<torch::Tensor> replica_parameters(GradientSynchronizer& sync) {
  ParameterSharding* sharding = sync.sharding();
  return sharding ? sharding->replica_parameters() : std::vector<torch::Tensor>{};
}

Regrouping& regrouping_of(GradientSynchronizer& sync) {
  Regrouping* regrouping = sync.regrouping();
  if (regrouping == nullptr) {
    throw std::logic_error(sync.name() +
                           " cannot go on in a new group: its lost rank's shards exist "
                           "nowhere else");
  }
  return *regrouping;
}

ParameterSharding& sharding_of(GradientSynchronizer& sync) {
  ParameterSharding* sharding = sync.sharding();
  if (sharding == nullptr)
    throw std::logic_error(sync.name() + " keeps no shards of its parameters");
  return *sharding;
}

void GradientSynchronizer::zero_grad() {
  for (auto& p : optimizer_parameters()) p.mutable_grad().reset();
}
}  // namespace ddpd
