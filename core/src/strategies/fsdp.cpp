// fsdp: parameters, gradients and optimizer state sharded, unit by unit (docs/fsdp.md).
//
// A unit's trainable parameters are laid end to end in one flat buffer, right-padded to a
// multiple of N; rank r keeps elements [r·L/N, (r+1)·L/N) of it (its shard). The module's
// parameters are views into the unit's full buffer, whose storage exists only while the unit is
// gathered: freeing the storage (not swapping tensors) also releases what autograd saved for
// backward, and gathering again into the same storage brings those views back.
//
// Per step, for a UnitwiseModule (the Transformer: embedding, blocks, final norm with the head):
//  forward   before unit u: wait for its all-gather (or start it); start the next
//            `fsdp_prefetch` units' gathers in forward order. After it: free u's full
//            parameters unless reshard_after_forward is off or u runs last in forward (the head,
//            or the tied embedding unit, which backward needs first); hook u's output.
//  backward  the output hook fires when u's backward is about to run: free the unit whose
//            backward just finished, wait for u's gather, give u's parameters gradients that are
//            views into one zeroed full-gradient buffer, start the next gathers in backward
//            order, and wait for the reduce-scatter of the unit two back (so the full gradients
//            of two non-adjacent units are never alive at once). When the last of u's gradients
//            has been accumulated (a hook on each gradient accumulator), u's full gradient is
//            reduce-scattered asynchronously into its gradient shard.
//  finish    reduce-scatter what did not start, wait for all, divide by N, free everything.
// Other modules, and --fsdp-units whole, are one unit gathered in prepare_forward() for the step.
//
// Every rank must launch the same collectives in the same order: gathers and reduce-scatters
// start from the unit hooks and the gradient-accumulator hooks, which autograd runs in the same
// order on every rank (the same graph; accumulators run as soon as they are ready).
//
// Gradient accumulation keeps each unit's full gradient from its first micro-batch's backward
// to the reduce-scatter after the last (PyTorch FSDP's no_sync()): one reduce-scatter per step,
// so the bytes reduce-scattered per optimizer step do not change with K. It costs a full
// gradient of the whole model per rank for the step; parameters are still gathered per unit
// and micro-batch.
//
// Thread contract: the unit and accumulator hooks run on autograd's thread while the training
// thread waits in backward (on CPU they are the same thread), so the state below is touched by
// one thread at a time.
#include <algorithm>
#include <map>

#include "comm/predecessor_keeping_reduce_scatter.h"
#include "comm/ring_shift.h"
#include "device/storage_memory.h"
#include "strategies/fsdp_relayout.h"
#include "strategies/fsdp_shard.h"
#include "strategies/synchronizer_base.h"

namespace ddpd::detail {
namespace {

// What is alive of full parameters and gradients, and its peak since reset().
class UnshardedMeter {
 public:
  void add_parameters(int64_t bytes) { update(bytes, 0, 0); }
  void add_gradients(int64_t bytes, int64_t units) { update(0, bytes, units); }
  void reset() {
    peak_ = UnshardedPeak{now_.parameter_bytes, now_.gradient_bytes,
                          now_.parameter_bytes + now_.gradient_bytes, now_.gradient_units};
  }
  const UnshardedPeak& peak() const { return peak_; }

 private:
  void update(int64_t parameter_bytes, int64_t gradient_bytes, int64_t units) {
    now_.parameter_bytes += parameter_bytes;
    now_.gradient_bytes += gradient_bytes;
    now_.gradient_units += units;
    peak_.parameter_bytes = std::max(peak_.parameter_bytes, now_.parameter_bytes);
    peak_.gradient_bytes = std::max(peak_.gradient_bytes, now_.gradient_bytes);
    peak_.gradient_units = std::max(peak_.gradient_units, now_.gradient_units);
    peak_.total_bytes = std::max(peak_.total_bytes, now_.parameter_bytes + now_.gradient_bytes);
  }
  UnshardedPeak now_;
  UnshardedPeak peak_;
};

struct FlatUnit {
  std::string name;
  std::vector<torch::Tensor> params;  // trainable, views into `full`
  std::vector<int64_t> offsets;       // of each in the flat layout
  ShardLayout layout;
  torch::Tensor full;     // [padded]: storage allocated while gathered
  bool gathered = false;  // `full` holds the unit's values, or will once `gathering` is done
  PendingCollective gathering;
  ShardPieces own;           // this rank's elements [r·S, (r+1)·S): the optimizer's
  torch::Tensor full_grad;   // [padded] while the unit's gradients are unsharded
  torch::Tensor grad_shard;  // [shard_numel]: a view into the step's gradient shards
  int64_t grad_at = 0;       // where grad_shard starts in them
  bool reducing = false;     // reduce-scatter launched this step
  PendingReduceScatter reduce;
  int64_t receive_bytes = 0;  // what `reduce` allocates besides the shard, while in flight
  ShardPieces replica;        // --shard-replicas: the ring predecessor's elements
  size_t ready = 0;           // params whose gradient this backward has accumulated

  int64_t bytes() const { return layout.padded_numel * full.element_size(); }
};

class FsdpSynchronizer final : public GradientSynchronizer,
                               public ParameterSharding,
                               public Regrouping,
                               private UnitForwardHooks {
 public:
  FsdpSynchronizer(torch::nn::Module& model, std::shared_ptr<Communicator> comm,
                   const SyncOptions& options)
      : model_(model),
        comm_(std::move(comm)),
        prefetch_(options.fsdp_prefetch),
        reshard_after_forward_(options.reshard_after_forward),
        replicas_(options.shard_replicas && comm_->info().world_size > 1),
        source_(options.source) {
    // A rank that joins takes its shards from the survivors, and forms the ring in regroup().
    if (!options.same_initial_state && !options.joins_running_job) {
      broadcast_module_state(model_, *comm_);
    }
    if (!options.joins_running_job) form_ring();
    unitwise_ = options.fsdp_whole_model ? nullptr : dynamic_cast<UnitwiseModule*>(&model_);
    build_units();
    source_ = nullptr;  // not owned, and not needed again
    source_names_.clear();
    std::vector<torch::Tensor> all;
    for (size_t u = 0; u < units_.size(); ++u) {
      for (size_t k = 0; k < units_[u].params.size(); ++k) {
        all.push_back(units_[u].params[k]);
        owner_.push_back(u);
      }
    }
    ready_hooks_ = std::make_unique<GradReadyHooks>(all, [this](size_t i) { on_ready(i); });
    if (unitwise_) unitwise_->set_unit_hooks(this);
  }

  ~FsdpSynchronizer() override {
    if (unitwise_) unitwise_->set_unit_hooks(nullptr);
  }

  std::string name() const override { return "fsdp"; }
  ParameterSharding* sharding() override { return this; }
  // Only with copies of each shard: a lost rank's shards exist nowhere else.
  Regrouping* regrouping() override { return replicas_ ? this : nullptr; }
  std::vector<int64_t> launch_order() const override { return {}; }

  void zero_grad() override {
    for (auto& unit : units_) {
      unit.own.reset_gradients();
      unit.replica.reset_gradients();
    }
    meter_.reset();
  }

  void prepare_forward() override {
    forward_position_ = 0;
    if (!unitwise_) {
      for (size_t u = 0; u < units_.size(); ++u) {
        gather(u);
        allocate_gradients(u);  // no unit hook will: backward accumulates into them
      }
    }
  }

  void end_forward_only() override {
    for (size_t u = 0; u < units_.size(); ++u) reshard(u);
  }

  void finish_gradient_synchronization() override {
    torch::NoGradGuard no_grad;
    // Units whose reduce-scatter has not started (a parameter got no gradient, or whole-model
    // mode): in backward order, the same on every rank.
    for (size_t u = units_.size(); u-- > 0;) {
      if (!units_[u].reducing && units_[u].full_grad.defined()) start_reduce_scatter(u);
    }
    for (size_t u = 0; u < units_.size(); ++u) {
      if (units_[u].reducing) finish_reduce_scatter(u);
    }
    // --shard-replicas without the reduce-scatter that keeps the predecessor's sum (Gloo,
    // NCCL): every unit's sum to the successor in one shift, the predecessor's here. One shift per
    // step rather than one per unit as each lands, overlapped with backward: on the 2-core host
    // both cost the step the same within the rounds' spread (+4.3 to +5.5 % against +4.8 % at
    // world 3, bench_shard_replicas.sh), and one is fewer collectives, in one buffer.
    if (ring_ && grad_shards_.defined()) {
      ring_->shift(grad_shards_, replica_grads_, "shift/gradient_shards").wait();
    }
    // The sums went undivided, and each side divides the same bits by the same N.
    const double n = comm_->info().world_size;
    for (size_t u = 0; u < units_.size(); ++u) {
      FlatUnit& unit = units_[u];
      if (unit.reducing) {
        unit.grad_shard.div_(n);
        unit.own.set_gradients(unit.grad_shard);
        if (replica_grads_.defined()) {
          const torch::Tensor sum = replica_grads_.narrow(0, unit.grad_at, unit.grad_shard.numel());
          unit.replica.set_gradients(sum.div_(n));
        }
        unit.reducing = false;
      }
      reshard(u);
    }
    grad_shards_ = torch::Tensor();  // the pieces' gradients keep their views alive
    replica_grads_ = torch::Tensor();
  }

  std::vector<torch::Tensor> optimizer_parameters() override {
    std::vector<torch::Tensor> out;
    for (const auto& [u, k] : registration_order_) out.push_back(units_[u].own.pieces[k]);
    return out;
  }

  std::vector<HeldRange> optimizer_parameter_ranges() override {
    std::vector<HeldRange> out;
    for (const auto& [u, k] : registration_order_) out.push_back(units_[u].own.ranges[k]);
    return out;
  }

  std::vector<torch::Tensor> replica_parameters() override {
    std::vector<torch::Tensor> out;
    if (!replicas_) return out;
    for (const auto& [u, k] : registration_order_) out.push_back(units_[u].replica.pieces[k]);
    return out;
  }

  std::vector<HeldRange> replica_parameter_ranges() override {
    std::vector<HeldRange> out;
    if (!replicas_) return out;
    for (const auto& [u, k] : registration_order_) out.push_back(units_[u].replica.ranges[k]);
    return out;
  }

  std::vector<torch::Tensor> shard_parameters(int owner) override {
    const int rank = comm_->info().rank;
    const int world = comm_->info().world_size;
    if (owner == rank) return optimizer_parameters();
    if (replicas_ && owner == (rank + world - 1) % world) return replica_parameters();
    std::vector<ShardPieces> scratch;
    for (const auto& unit : units_) {
      const int64_t size = unit.layout.shard_numel;
      scratch.push_back(make_shard_pieces(torch::zeros({size}, unit.own.values.options()),
                                          unit.offsets, numels_of(unit), owner * size));
    }
    std::vector<torch::Tensor> out;
    for (const auto& [u, k] : registration_order_) out.push_back(scratch[u].pieces[k]);
    return out;
  }

  // At the same world size only: the shards keep their layout, and every rank its number.
  void regroup(std::shared_ptr<Communicator> comm,
               const std::vector<int64_t>& /*launch_order: fsdp has none*/) override {
    if (comm->info().world_size != comm_->info().world_size) {
      throw std::logic_error(
          "fsdp regroups at the same world size only; a smaller group is a "
          "relayout");
    }
    comm_ = std::move(comm);
    torch::NoGradGuard no_grad;
    for (auto& unit : units_) drop_in_flight(unit);
    start_afresh();
  }

  // Shrinking in place (fsdp_relayout.h): unit by unit, the whole flat layout from the old
  // shards' providers, and this rank's new shard and its new predecessor's cut out of it.
  int64_t relayout(std::shared_ptr<Communicator> comm, const std::vector<OldShardHolders>& shards,
                   ShardStateRelay& relay) override {
    const int old_rank = comm_->info().rank;
    const int old_world = comm_->info().world_size;
    const int rank = comm->info().rank;
    const int world = comm->info().world_size;
    TORCH_CHECK(replicas_ && world < old_world && static_cast<int>(shards.size()) == old_world,
                "fsdp: shards are laid out again only with --shard-replicas, for a smaller group");
    torch::NoGradGuard no_grad;
    // What the failed step left goes before the new shards are made.
    for (auto& unit : units_) drop_in_flight(unit);
    grad_shards_ = replica_grads_ = torch::Tensor();
    int64_t scratch_numel = 0;
    torch::TensorOptions options;
    for (const auto& unit : units_) {
      const ShardLayout layout = shard_layout(unit.layout.numel, world);
      scratch_numel = std::max(scratch_numel, whole_unit_numel(unit.layout, layout, relay));
      if (!unit.params.empty()) options = unit.own.values.options();
    }
    const torch::Tensor scratch = torch::empty({scratch_numel}, options);
    int64_t bytes = 0;
    for (auto& unit : units_) {
      if (unit.params.empty()) continue;
      const ShardLayout layout = shard_layout(unit.layout.numel, world);
      const WholeUnit whole =
          assemble_whole_unit({unit.own, unit.replica, old_rank, old_world, unit.layout}, shards,
                              *comm, layout.padded_numel, relay, unit.name, scratch);
      bytes += whole.bytes;
      for (const auto& piece : unit.own.pieces) relay.drop(piece, /*own=*/true);
      for (const auto& piece : unit.replica.pieces) relay.drop(piece, /*own=*/false);
      unit.layout = layout;
      unit.own = cut_shard(whole, layout, unit.offsets, numels_of(unit), rank, true, relay);
      unit.replica = world > 1 ? cut_shard(whole, layout, unit.offsets, numels_of(unit),
                                           (rank + world - 1) % world, false, relay)
                               : ShardPieces();
      view_unallocated_full(unit);
    }
    comm_ = std::move(comm);
    replicas_ = world > 1;
    grad_shards_numel_ = 0;
    for (auto& unit : units_) {
      unit.grad_at = grad_shards_numel_;
      grad_shards_numel_ += unit.layout.shard_numel;
    }
    start_afresh();
    return bytes;
  }

  std::vector<torch::Tensor> full_parameters() override {
    std::map<const void*, torch::Tensor> copies;  // by parameter
    visit_full_parameters([&](const std::vector<torch::Tensor>& group) {
      for (const auto& p : group) copies[p.unsafeGetTensorImpl()] = p.detach().clone();
    });
    std::vector<torch::Tensor> out;  // registration order, as the other strategies
    for (const auto& p : unique_parameters(model_))
      out.push_back(copies.at(p.unsafeGetTensorImpl()));
    return out;
  }

  void visit_full_parameters(
      const std::function<void(const std::vector<torch::Tensor>&)>& visit) override {
    visit(frozen_);
    for (size_t u = 0; u < units_.size(); ++u) {
      const bool was_gathered = units_[u].gathered;
      gather(u);
      visit(units_[u].params);
      if (!was_gathered) reshard(u);
    }
  }

  UnshardedPeak step_peak_unsharded() const override { return meter_.peak(); }

 private:
  void build_units() {
    torch::NoGradGuard no_grad;
    std::vector<std::vector<torch::Tensor>> groups;
    std::vector<std::string> names;
    if (unitwise_) {
      for (auto& unit : unitwise_->units()) {
        names.push_back(unit.name);
        groups.push_back(unit.parameters);
      }
      forward_order_ = unitwise_->forward_order();
    } else {
      names.push_back("model");
      groups.push_back(unique_parameters(model_));
      forward_order_ = {0};
    }
    if (source_) {
      for (const auto& [name, p] : named_unique_parameters(model_))
        source_names_[p.unsafeGetTensorImpl()] = name;
    }
    for (size_t g = 0; g < groups.size(); ++g) {
      units_.push_back(make_unit(names[g], groups[g]));
      units_.back().grad_at = grad_shards_numel_;
      grad_shards_numel_ += units_.back().layout.shard_numel;
    }
    // Optimizer parameters follow the model's registration order (checkpoints pair them with
    // named_unique_parameters), whatever unit holds them.
    for (const auto& p : unique_trainable_parameters(model_)) {
      for (size_t u = 0; u < units_.size(); ++u) {
        for (size_t k = 0; k < units_[u].params.size(); ++k) {
          if (units_[u].params[k].is_same(p)) registration_order_.emplace_back(u, k);
        }
      }
    }
    size_t held = 0;
    for (const auto& unit : units_) held += unit.params.size();
    TORCH_CHECK(registration_order_.size() == held,
                "fsdp: the units do not hold every trainable parameter exactly once");
    meter_.reset();
  }

  // The unit of `group`'s trainable parameters, with this rank's shard filled (from the
  // parameters, or from source_ when they hold no memory), and the parameters turned into views
  // of its full buffer, whose memory is then freed. Frozen parameters stay whole on every rank.
  FlatUnit make_unit(const std::string& name, const std::vector<torch::Tensor>& group) {
    FlatUnit unit;
    unit.name = name;
    int64_t numel = 0;
    for (const auto& p : group) {
      if (!p.requires_grad()) {
        keep_frozen(p);
        continue;
      }
      unit.params.push_back(p);
      unit.offsets.push_back(numel);
      numel += p.numel();
    }
    unit.layout = shard_layout(numel, comm_->info().world_size);
    const int rank = comm_->info().rank;
    const int world = comm_->info().world_size;
    const auto options = group.empty() ? torch::TensorOptions(torch::kFloat32)
                                       : group.front().options().requires_grad(false);
    if (source_) {
      // Never written here, so never resident: the shards are read straight from the source.
      unit.full = torch::empty({unit.layout.padded_numel}, options);
    } else {
      unit.full = torch::zeros({unit.layout.padded_numel}, options);
      for (size_t k = 0; k < unit.params.size(); ++k) {
        unit.full.narrow(0, unit.offsets[k], unit.params[k].numel())
            .copy_(unit.params[k].reshape(-1));
      }
    }
    unit.own = shard_of(unit, rank);
    if (replicas_) unit.replica = shard_of(unit, (rank + world - 1) % world);
    // From here on the module's parameters are views into the unit's full buffer.
    for (size_t k = 0; k < unit.params.size(); ++k) {
      const torch::Tensor& param = unit.params[k];
      param.set_data(unit.full.narrow(0, unit.offsets[k], param.numel()).view(param.sizes()));
    }
    free_storage(unit.full);
    return unit;
  }

  // Rank `owner`'s shard of `unit`: from its full buffer, or read from source_ (the padding
  // stays zero).
  ShardPieces shard_of(const FlatUnit& unit, int owner) const {
    const int64_t size = unit.layout.shard_numel;
    torch::Tensor values = source_ ? torch::zeros({size}, unit.full.options())
                                   : unit.full.narrow(0, owner * size, size).clone();
    ShardPieces shard = make_shard_pieces(values, unit.offsets, numels_of(unit), owner * size);
    if (source_) {
      for (size_t k = 0; k < unit.params.size(); ++k) {
        source_->read(source_name(unit.params[k]), shard.ranges[k].begin, shard.ranges[k].end,
                      shard.pieces[k]);
      }
    }
    return shard;
  }

  static std::vector<int64_t> numels_of(const FlatUnit& unit) {
    std::vector<int64_t> numels;
    for (const auto& p : unit.params) numels.push_back(p.numel());
    return numels;
  }

  // What a failed step left of `unit`: its collectives were on the aborted group, whose threads
  // may still write into their buffers (the works keep them alive), so the unit takes a new,
  // unallocated full buffer rather than freeing the old one under them.
  void drop_in_flight(FlatUnit& unit) {
    unit.gathering = PendingCollective();
    unit.reduce = PendingReduceScatter();
    unit.receive_bytes = 0;
    unit.gathered = unit.reducing = false;
    unit.full_grad = unit.grad_shard = torch::Tensor();
    unit.own.reset_gradients();
    unit.replica.reset_gradients();
    unit.ready = 0;
    view_unallocated_full(unit);
  }

  // The unit's parameters as views of a new full buffer of its layout, never written, whose
  // memory is freed until the next gather.
  static void view_unallocated_full(FlatUnit& unit) {
    if (unit.params.empty()) return;
    unit.full = torch::empty({unit.layout.padded_numel}, unit.full.options());
    for (size_t k = 0; k < unit.params.size(); ++k) {
      torch::Tensor& param = unit.params[k];
      param.mutable_grad().reset();
      param.set_data(unit.full.narrow(0, unit.offsets[k], param.numel()).view(param.sizes()));
    }
    free_storage(unit.full);
  }

  // After a regroup or a relayout: nothing of an earlier step is in flight or counted, and the
  // ring (where the transport needs one) is formed over the new group.
  void start_afresh() {
    grad_shards_ = torch::Tensor();
    replica_grads_ = torch::Tensor();
    forward_position_ = 0;
    backward_position_ = 0;
    meter_ = UnshardedMeter();
    for (const auto& p : frozen_) meter_.add_parameters(p.nbytes());
    meter_.reset();
    form_ring();
  }

  void keep_frozen(const torch::Tensor& p) {
    if (source_) {
      allocate_storage(p);
      source_->read(source_name(p), 0, p.numel(), p.view({-1}));
    }
    frozen_.push_back(p);
    meter_.add_parameters(p.nbytes());  // stays whole on every rank
  }

  const std::string& source_name(const torch::Tensor& p) const {
    return source_names_.at(p.unsafeGetTensorImpl());
  }

  // --- gathering -----------------------------------------------------------------------------

  void start_gather(size_t u) {
    FlatUnit& unit = units_[u];
    if (unit.gathered || unit.params.empty()) return;
    allocate_storage(unit.full);
    meter_.add_parameters(unit.bytes());
    unit.gathered = true;
    unit.gathering = comm_->all_gather(unit.full, unit.own.values, "all_gather/" + unit.name);
  }

  void gather(size_t u) {
    start_gather(u);
    units_[u].gathering.wait();
  }

  void reshard(size_t u) {
    FlatUnit& unit = units_[u];
    if (!unit.gathered) return;
    unit.gathering.wait();  // never free memory a collective still writes
    free_storage(unit.full);
    meter_.add_parameters(-unit.bytes());
    unit.gathered = false;
  }

  // --- forward -------------------------------------------------------------------------------

  void before_unit_forward(size_t u) override {
    if (forward_position_ >= forward_order_.size()) forward_position_ = 0;  // next micro-batch
    if (forward_position_ == 0) backward_position_ = 0;
    TORCH_CHECK(forward_order_.at(forward_position_) == u, "fsdp: unit ", u,
                " ran out of the forward order");
    gather(u);
    for (int k = 1; k <= prefetch_; ++k) {
      const size_t at = forward_position_ + k;
      if (at < forward_order_.size()) start_gather(forward_order_[at]);
    }
    ++forward_position_;
  }

  torch::Tensor after_unit_forward(size_t u, torch::Tensor output) override {
    const bool runs_again = std::find(forward_order_.begin() + forward_position_,
                                      forward_order_.end(), u) != forward_order_.end();
    const bool last = forward_position_ == forward_order_.size();
    if (reshard_after_forward_ && !runs_again && !last) reshard(u);
    if (output.requires_grad()) {
      output.register_hook([this, u](const torch::Tensor&) { before_unit_backward(u); });
    }
    return output;
  }

  // --- backward ------------------------------------------------------------------------------

  // Backward runs the forward order reversed; position p is forward_order_[size - 1 - p].
  size_t unit_at_backward(size_t position) const {
    return forward_order_[forward_order_.size() - 1 - position];
  }
  bool used_later_in_backward(size_t u, size_t position) const {
    for (size_t p = position + 1; p < forward_order_.size(); ++p) {
      if (unit_at_backward(p) == u) return true;
    }
    return false;
  }

  void before_unit_backward(size_t u) {
    torch::NoGradGuard no_grad;
    const size_t position = backward_position_++;
    TORCH_CHECK(position < forward_order_.size() && unit_at_backward(position) == u, "fsdp: unit ",
                u, " ran out of the backward order");
    if (position == 0) {
      for (auto& unit : units_) unit.ready = 0;
    }
    // The unit before this one in backward order has finished: its parameters can go.
    if (position >= 1 && !used_later_in_backward(unit_at_backward(position - 1), position)) {
      reshard(unit_at_backward(position - 1));
    }
    free_reduced_gradients();
    // Bound the full gradients: the unit two back must be reduce-scattered and freed.
    if (position >= 2) {
      const size_t two_back = unit_at_backward(position - 2);
      if (units_[two_back].reducing && !used_later_in_backward(two_back, position)) {
        finish_reduce_scatter(two_back);
      }
    }
    gather(u);
    for (int k = 1; k <= prefetch_; ++k) {
      if (position + k < forward_order_.size()) start_gather(unit_at_backward(position + k));
    }
    allocate_gradients(u);
  }

  void allocate_gradients(size_t u) {
    FlatUnit& unit = units_[u];
    if (unit.full_grad.defined() || unit.params.empty()) return;
    unit.full_grad = torch::zeros({unit.layout.padded_numel}, unit.full.options());
    meter_.add_gradients(unit.bytes(), 1);
    for (size_t k = 0; k < unit.params.size(); ++k) {
      auto& p = unit.params[k];
      p.mutable_grad() = unit.full_grad.narrow(0, unit.offsets[k], p.numel()).view(p.sizes());
    }
  }

  void on_ready(size_t index) {
    const size_t u = owner_[index];
    FlatUnit& unit = units_[u];
    if (++unit.ready == unit.params.size() && sync_on_backward() && unitwise_) {
      start_reduce_scatter(u);
    }
    if (unitwise_) free_reduced_gradients();
  }

  // Frees the full gradient of every unit whose reduce-scatter has ended, without waiting for
  // any: from each gradient hook and unit hook, so a unit's full gradient lives until its
  // reduce-scatter is done and no longer (the blocking bound in before_unit_backward is for
  // the one that has not). The same on every rank or not, it launches nothing.
  void free_reduced_gradients() {
    for (size_t u = 0; u < units_.size(); ++u) {
      FlatUnit& unit = units_[u];
      if (unit.reducing && unit.full_grad.defined() && unit.reduce.completed()) {
        finish_reduce_scatter(u);
      }
    }
  }

  void start_reduce_scatter(size_t u) {
    FlatUnit& unit = units_[u];
    if (unit.reducing) return;
    if (!unit.full_grad.defined()) allocate_gradients(u);  // no gradient reached it: zeros
    for (auto& p : unit.params) p.mutable_grad().reset();  // the flat buffer holds them
    if (!grad_shards_.defined()) {
      grad_shards_ = torch::empty({grad_shards_numel_}, unit.full_grad.options());
      if (replicas_) replica_grads_ = torch::empty_like(grad_shards_);
    }
    unit.grad_shard = grad_shards_.narrow(0, unit.grad_at, unit.layout.shard_numel);
    // The exchange's own buffer: none over shm and NCCL, which sum into the shard; over Gloo
    // none at world 2 and one chunk beyond (comm/pairwise_reduce_scatter.h).
    unit.receive_bytes = comm_->reduce_scatter_buffer_bytes(unit.grad_shard.nbytes());
    meter_.add_gradients(unit.receive_bytes, 0);
    const std::string name = "reduce_scatter/" + unit.name;
    if (replicas_ && !ring_) {
      torch::Tensor kept = replica_grads_.narrow(0, unit.grad_at, unit.layout.shard_numel);
      unit.reduce = reduce_scatter_sum_keeping_predecessor_async(*comm_, unit.grad_shard, kept,
                                                                 unit.full_grad, name);
    } else {
      unit.reduce = comm_->reduce_scatter_sum_async(unit.grad_shard, unit.full_grad, name);
    }
    unit.reducing = true;
  }

  // --shard-replicas: the predecessor's sums come with each reduce-scatter where the transport
  // keeps them (shm), else from one shift per step around a ring of pair groups.
  void form_ring() {
    ring_.reset();
    if (replicas_ && !reduce_scatter_keeps_predecessor(*comm_)) {
      ring_ = std::make_unique<RingShift>(comm_);
    }
  }

  void finish_reduce_scatter(size_t u) {
    FlatUnit& unit = units_[u];
    if (!unit.full_grad.defined()) return;  // already finished
    unit.reduce.wait();
    unit.full_grad = torch::Tensor();
    meter_.add_gradients(-(unit.bytes() + unit.receive_bytes), -1);
    unit.receive_bytes = 0;
  }

  torch::nn::Module& model_;
  std::shared_ptr<Communicator> comm_;
  int prefetch_;
  bool reshard_after_forward_;
  bool replicas_;  // --shard-replicas at world > 1
  // replicas_ over a transport whose reduce-scatter cannot keep the predecessor's sums; null until
  // formed (a joining rank's regroup).
  std::unique_ptr<RingShift> ring_;
  // The step's reduced gradient shards of every unit, end to end (unit.grad_at), while any is
  // alive: one tensor for --shard-replicas' one shift. Both are new each step: the pieces'
  // gradients are views of them until zero_grad.
  torch::Tensor grad_shards_;
  torch::Tensor replica_grads_;  // replicas_: the predecessor's sums, laid out as grad_shards_
  int64_t grad_shards_numel_ = 0;
  // Construction only (SyncOptions::source): where unallocated parameters' values come from, and
  // each parameter's name there.
  const ParameterSource* source_;
  std::map<const void*, std::string> source_names_;
  UnitwiseModule* unitwise_ = nullptr;  // null: the whole model is one unit
  std::vector<FlatUnit> units_;
  std::vector<size_t> forward_order_;  // unit indices in the order forward runs them
  std::vector<size_t> owner_;          // unit of each gradient-ready hook index
  std::vector<std::pair<size_t, size_t>> registration_order_;  // (unit, param) per trainable
  std::vector<torch::Tensor> frozen_;  // parameters without gradient: whole on every rank
  std::unique_ptr<GradReadyHooks> ready_hooks_;
  size_t forward_position_ = 0;
  size_t backward_position_ = 0;
  UnshardedMeter meter_;
};

}  // namespace

std::unique_ptr<GradientSynchronizer> make_fsdp(torch::nn::Module& model,
                                                std::shared_ptr<Communicator> comm,
                                                const SyncOptions& options) {
  return std::make_unique<FsdpSynchronizer>(model, std::move(comm), options);
}

}  // namespace ddpd::detail
