#include "shm/shm_process_group.h"

#include "shm/rank_order_sum.h"
#include "shm/served.h"
#include "shm/shm_work.h"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <immintrin.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace ddpd::shm {
namespace {

int64_t monotonic_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

constexpr int64_t kHeartbeatIntervalNs = 100'000'000;  // 100 ms
constexpr int64_t kHeartbeatStaleNs = 2'000'000'000;   // a peer silent this long is dead

// [lo, hi) of `length` owned by `rank` of `world`: sizes that do not divide split unevenly.
std::pair<int64_t, int64_t> share(int64_t length, int rank, int world) {
  return {length * rank / world, length * (rank + 1) / world};
}

at::Tensor view_of(char* data, int64_t elements, at::ScalarType dtype) {
  return at::from_blob(data, {elements}, at::TensorOptions().dtype(dtype));
}

void reduce_into(at::Tensor& accumulator, const at::Tensor& other, c10d::ReduceOp op) {
  switch (op) {
    case c10d::ReduceOp::SUM:
      accumulator.add_(other);
      break;
    case c10d::ReduceOp::MAX:
      at::maximum_out(accumulator, accumulator, other);
      break;
    case c10d::ReduceOp::MIN:
      at::minimum_out(accumulator, accumulator, other);
      break;
    case c10d::ReduceOp::PRODUCT:
      accumulator.mul_(other);
      break;
    case c10d::ReduceOp::BAND:
      accumulator.bitwise_and_(other);
      break;
    case c10d::ReduceOp::BOR:
      accumulator.bitwise_or_(other);
      break;
    case c10d::ReduceOp::BXOR:
      accumulator.bitwise_xor_(other);
      break;
    default:
      TORCH_CHECK(false, "shm: reduce op ", static_cast<int>(op), " is not supported");
  }
}

// `count` elements reduced over `terms` in rank order, so every rank gets the same bits, into
// every destination of `outs`. A destination may alias a term: float sums take the fused pass
// (rank_order_sum.h); the rest reduce into a temporary first. AVG is the sum divided by the
// number of terms, here in the reduce phase on the sub-range this rank owns (one pass over it,
// not one over the whole tensor afterwards); the division is elementwise and correctly rounded,
// so it gives the bits of dividing the whole sum (as PyTorch does after Gloo's SUM).
void reduce_in_rank_order(const std::vector<const void*>& terms, int64_t count,
                          at::ScalarType dtype, c10d::ReduceOp op, const std::vector<void*>& outs) {
  if (count == 0) return;
  const bool average = op == c10d::ReduceOp::AVG;
  const c10d::ReduceOp base = average ? c10d::ReduceOp(c10d::ReduceOp::SUM) : op;
  const size_t bytes = static_cast<size_t>(count) * at::elementSize(dtype);
  const auto divisor = static_cast<int64_t>(terms.size());
  if (base == c10d::ReduceOp::SUM && sum_in_rank_order(terms, count, dtype, outs)) {
    if (!average) return;
    view_of(static_cast<char*>(outs[0]), count, dtype).div_(divisor);
    for (size_t i = 1; i < outs.size(); ++i) std::memcpy(outs[i], outs[0], bytes);
    return;
  }
  auto term = [&](size_t r) {
    return view_of(static_cast<char*>(const_cast<void*>(terms[r])), count, dtype);
  };
  at::Tensor result = term(0).clone();
  for (size_t r = 1; r < terms.size(); ++r) reduce_into(result, term(r), base);
  if (average) result.div_(divisor);
  for (void* out : outs) std::memcpy(out, result.data_ptr(), bytes);
}

// A collective after shutdown() (the communicator's abort, or its end) fails as aborted.
TransportFailure group_shut_down_failure() {
  return {CollectiveFailure::kAborted, -1, "shm: the process group is shut down"};
}

}  // namespace

ShmProcessGroup::ShmProcessGroup(Segment segment, int rank, int world_size,
                                 std::chrono::milliseconds timeout, int ranks_on_host)
    : c10d::Backend(rank, world_size),
      segment_(std::move(segment)),
      timeout_(timeout),
      // More ranks than cores: a spinning rank takes the core a peer needs to reach the phase
      // it waits for, so yield almost at once. A group of two split from a job of three on two
      // cores counts three: with 4096 spins there, fsdp's ring shift (one per unit) cost 11.3 %
      // of the step, with 8 spins 4.8 % (world 3, medians of 5 rounds each, one A/B).
      spin_limit_(std::max(world_size, ranks_on_host) >
                          static_cast<int>(std::thread::hardware_concurrency())
                      ? 8
                      : 4096) {
  RankControl& mine = segment_.control(rank);
  mine.pid = static_cast<int32_t>(::getpid());
  mine.pid_namespace = pid_namespace();
  mine.heartbeat_ns.store(monotonic_ns(), std::memory_order_release);
  mine.state.store(kJoined, std::memory_order_release);
  executor_ = std::thread([this] { execute_loop(); });
  heartbeat_ = std::thread([this] { heartbeat_loop(); });
}

ShmProcessGroup::~ShmProcessGroup() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  stop_requested_.store(true);
  wake_.notify_all();
  if (executor_.joinable()) executor_.join();
  if (heartbeat_.joinable()) heartbeat_.join();
  segment_.control(rank_).state.store(kLeft, std::memory_order_release);
}

c10::intrusive_ptr<c10d::Work> ShmProcessGroup::enqueue(std::vector<at::Tensor> outputs,
                                                        std::function<void(Deadline)> run,
                                                        c10d::OpType type,
                                                        std::chrono::milliseconds timeout,
                                                        bool blocking) {
  auto work = c10::make_intrusive<ShmWork>(std::move(outputs), rank_, type);
  // A call's own timeout (c10d's options; unset by default) overrides the group's.
  const std::chrono::milliseconds limit = timeout == c10d::kUnsetTimeout ? timeout_ : timeout;
  Task task{work, std::move(run), std::chrono::steady_clock::now() + limit, limit};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    TORCH_CHECK(!stopping_, "shm: the process group is shut down");
    // On this thread only when nothing launched earlier is still to run: launch order holds.
    if (!blocking || running_ || !queue_.empty()) {
      queue_.push_back(std::move(task));
      blocking = false;
    } else {
      running_ = true;  // the executor starts nothing until this thread is done
    }
  }
  if (blocking) {
    run_task(task);
    std::lock_guard<std::mutex> lock(mutex_);
    running_ = false;
  }
  wake_.notify_all();
  return work;
}

void ShmProcessGroup::run_task(Task& task) {
  std::exception_ptr error;
  try {
    if (broken_) std::rethrow_exception(broken_);
    if (stop_requested_.load()) throw group_shut_down_failure();
    running_timeout_ = task.timeout;
    task.run(task.deadline);
  } catch (const std::exception&) {
    // The ranks' phase counters no longer agree: every later collective fails the same way.
    if (!broken_) broken_ = std::current_exception();
    error = std::current_exception();
  }
  static_cast<ShmWork*>(task.work.get())->complete(error);
}

void ShmProcessGroup::execute_loop() {
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // Not while a blocking launch runs its task on its own thread.
      wake_.wait(lock, [&] { return !running_ && (stopping_ || !queue_.empty()); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
    }
    run_task(task);
    std::lock_guard<std::mutex> lock(mutex_);
    running_ = false;
  }
}

void ShmProcessGroup::heartbeat_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    segment_.control(rank_).heartbeat_ns.store(monotonic_ns(), std::memory_order_release);
    wake_.wait_for(lock, std::chrono::nanoseconds(kHeartbeatIntervalNs));
  }
}

void ShmProcessGroup::finish_phase() {
  segment_.control(rank_).phase.fetch_add(1, std::memory_order_acq_rel);
}

std::optional<TransportFailure> ShmProcessGroup::peer_gone(int rank) const {
  const RankControl& peer = segment_.control(rank);
  const std::string who =
      "shm: rank " + std::to_string(rank) + " (pid " + std::to_string(peer.pid) + ") ";
  const int32_t state = peer.state.load(std::memory_order_acquire);
  // Leaving is what a rank's group does when the rank ends, whether its process then exits or
  // not (a daemon's rank that failed or was cancelled): "its process exited" misreported those.
  if (state == kLeft) {
    return TransportFailure(
        CollectiveFailure::kPeerExited, rank,
        who + "left the group (its rank ended: it failed, was cancelled or exited)");
  }
  if (state != kJoined) return std::nullopt;  // still creating its group: the timeout covers it
  if (peer.pid > 0 && peer.pid_namespace == pid_namespace() && ::kill(peer.pid, 0) != 0 &&
      errno == ESRCH) {
    return TransportFailure(CollectiveFailure::kPeerExited, rank,
                            who + "is gone (its process exited)");
  }
  const int64_t silent_ns = monotonic_ns() - peer.heartbeat_ns.load(std::memory_order_acquire);
  if (silent_ns > kHeartbeatStaleNs) {
    return TransportFailure(CollectiveFailure::kPeerSilent, rank,
                            who + "stopped its heartbeat " + std::to_string(silent_ns / 1000000) +
                                " ms ago (its process is stopped, hung in the kernel, or exited)");
  }
  return std::nullopt;
}

std::vector<bool> ShmProcessGroup::gone_ranks() const {
  std::vector<bool> gone(size_, false);
  for (int r = 0; r < size_; ++r) gone[r] = r != rank_ && peer_gone(r).has_value();
  return gone;
}

void ShmProcessGroup::wait_for_phase(uint64_t phase, Deadline deadline, int only_rank) {
  // A rank this wait still needs: the one named (or any), short of the phase.
  auto holds_the_wait = [&](int r) {
    return (only_rank < 0 || r == only_rank) &&
           segment_.control(r).phase.load(std::memory_order_acquire) < phase;
  };
  auto lagging = [&]() -> int {
    for (int r = 0; r < size_; ++r) {
      if (holds_the_wait(r)) return r;
    }
    return -1;
  };
  int64_t next_check_ns = 0;
  for (uint64_t spin = 0;; ++spin) {
    const int behind = lagging();
    if (behind < 0) return;
    if (spin < spin_limit_) {
      _mm_pause();
      continue;
    }
    const int64_t now_ns = monotonic_ns();
    if (now_ns >= next_check_ns) {  // every 10 ms: deadline, stop, peers' liveness
      next_check_ns = now_ns + 10'000'000;
      if (stop_requested_.load()) throw group_shut_down_failure();
      // Only a peer still short of the phase can hold this wait: one that got there and then
      // left (the job's last collective) is not a failure.
      for (int r = 0; r < size_; ++r) {
        if (r == rank_ || !holds_the_wait(r)) continue;
        if (auto gone = peer_gone(r)) throw *gone;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        throw TransportFailure(CollectiveFailure::kTimedOut, behind,
                               "shm: timed out after " + std::to_string(running_timeout_.count()) +
                                   " ms waiting for rank " + std::to_string(behind));
      }
    }
    if (spin < 16 * spin_limit_) {
      ::sched_yield();
    } else {
      const timespec pause{0, 50'000};  // 50 us: a peer that is computing, not communicating
      ::nanosleep(&pause, nullptr);
    }
  }
}

void ShmProcessGroup::chunk(const std::function<void(int)>& write,
                            const std::function<void(int)>& reduce,
                            const std::function<void(int)>& read, Deadline deadline) {
  const uint64_t g = chunks_done_;
  const int buffer = static_cast<int>(g % 2);
  if (g >= 2) wait_for_phase(3 * (g - 2) + 3, deadline);  // chunk g-2 (same buffer) was read
  if (write) write(buffer);
  finish_phase();
  wait_for_phase(3 * g + 1, deadline);
  if (reduce) reduce(buffer);
  finish_phase();
  wait_for_phase(3 * g + 2, deadline);
  if (read) read(buffer);
  finish_phase();
  ++chunks_done_;
}

void ShmProcessGroup::one_phase_chunk(const std::function<void(int)>& write,
                                      const std::function<void(int)>& reduce, Deadline deadline) {
  const uint64_t g = chunks_done_;
  const int buffer = static_cast<int>(g % 2);
  if (g >= 2) wait_for_phase(3 * (g - 2) + 3, deadline);  // chunk g-2 (same buffer) was read
  write(buffer);
  finish_phase();  // 3g+1
  wait_for_phase(3 * g + 1, deadline);
  reduce(buffer);
  // 3g+3: this rank no longer reads slot `buffer` (3g+2 is skipped: the header's protocol).
  segment_.control(rank_).phase.fetch_add(2, std::memory_order_acq_rel);
  ++chunks_done_;
}

void ShmProcessGroup::all_reduce_one_phase(const at::Tensor& tensor, c10d::ReduceOp op,
                                           Deadline deadline) {
  char* data = static_cast<char*>(tensor.data_ptr());
  const size_t bytes = tensor.nbytes();
  one_phase_chunk([&](int buffer) { std::memcpy(segment_.slot(rank_, buffer), data, bytes); },
                  // Every rank's whole tensor in rank order, this rank's read from its tensor,
                  // which is also the destination (a term exactly: rank_order_sum.h allows it).
                  [&](int buffer) {
                    std::vector<const void*> terms;
                    for (int r = 0; r < size_; ++r) {
                      terms.push_back(r == rank_ ? data : segment_.slot(r, buffer));
                    }
                    reduce_in_rank_order(terms, tensor.numel(), tensor.scalar_type(), op, {data});
                  },
                  deadline);
}

void ShmProcessGroup::all_reduce(const at::Tensor& tensor, c10d::ReduceOp op, Deadline deadline) {
  if (const auto by_rank = shared_buffers_->find(tensor.data_ptr(), tensor.nbytes());
      !by_rank.empty()) {
    all_reduce_shared(tensor, op, by_rank, deadline);
    return;
  }
  // The same on every rank (byte count, slot size): every rank takes the same path.
  const auto bytes = static_cast<int64_t>(tensor.nbytes());
  if (bytes <= std::min(kOnePhaseMaxBytes, segment_.slot_bytes())) {
    all_reduce_one_phase(tensor, op, deadline);
    return;
  }
  const at::ScalarType dtype = tensor.scalar_type();
  const int64_t element = tensor.element_size();
  const int64_t total = tensor.numel();
  const int64_t per_chunk = segment_.slot_bytes() / element;
  char* data = static_cast<char*>(tensor.data_ptr());
  for (int64_t offset = 0; offset < total || (total == 0 && offset == 0); offset += per_chunk) {
    const int64_t length = std::min(per_chunk, total - offset);
    char* chunk_data = data + offset * element;
    const auto [lo, hi] = share(length, rank_, size_);
    chunk(
        // Only the sub-ranges other ranks reduce: this rank reads its own from its tensor.
        [&](int buffer) {
          char* slot = segment_.slot(rank_, buffer);
          std::memcpy(slot, chunk_data, lo * element);
          std::memcpy(slot + hi * element, chunk_data + hi * element, (length - hi) * element);
        },
        // This rank's sub-range, summed in rank order into its own slot (which others read next).
        [&, lo = lo, hi = hi](int buffer) {
          std::vector<const void*> terms;
          for (int r = 0; r < size_; ++r) {
            terms.push_back(r == rank_ ? chunk_data + lo * element
                                       : segment_.slot(r, buffer) + lo * element);
          }
          reduce_in_rank_order(
              terms, hi - lo, dtype, op,
              {chunk_data + lo * element, segment_.slot(rank_, buffer) + lo * element});
        },
        // Every other rank's reduced sub-range, from its slot.
        [&](int buffer) {
          for (int r = 0; r < size_; ++r) {
            if (r == rank_) continue;
            const auto [r_lo, r_hi] = share(length, r, size_);
            std::memcpy(chunk_data + r_lo * element, segment_.slot(r, buffer) + r_lo * element,
                        (r_hi - r_lo) * element);
          }
        },
        deadline);
    if (total == 0) break;
  }
}

void ShmProcessGroup::all_reduce_shared(const at::Tensor& tensor, c10d::ReduceOp op,
                                        const std::vector<char*>& by_rank, Deadline deadline) {
  const at::ScalarType dtype = tensor.scalar_type();
  const int64_t element = tensor.element_size();
  const auto [lo, hi] = share(tensor.numel(), rank_, size_);
  chunk(
      nullptr,  // phase 1 only says "my data is complete": peers read it where it is
      // This rank's sub-range of every buffer, reduced and written back into every buffer: each
      // rank reads and writes its tensor's bytes once in all, as an in-place pass does.
      [&, lo = lo, hi = hi](int) {
        std::vector<const void*> terms;
        std::vector<void*> outs;
        for (int r = 0; r < size_; ++r) {
          terms.push_back(by_rank[r] + lo * element);
          outs.push_back(by_rank[r] + lo * element);
        }
        reduce_in_rank_order(terms, hi - lo, dtype, op, outs);
      },
      nullptr,  // chunk() waited for every rank's reduce: every buffer holds the whole result
      deadline);
}

std::vector<std::string> ShmProcessGroup::exchange(const std::string& record) {
  constexpr int64_t kRecordBytes = 256;
  TORCH_CHECK(static_cast<int64_t>(record.size()) < kRecordBytes, "shm: record too long");
  at::Tensor input = at::zeros({kRecordBytes}, at::kByte);
  std::memcpy(input.data_ptr(), record.data(), record.size());
  std::vector<at::Tensor> inputs{input};
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int r = 0; r < size_; ++r) outputs[0].push_back(at::zeros({kRecordBytes}, at::kByte));
  allgather(outputs, inputs, c10d::AllgatherOptions())->wait();
  std::vector<std::string> records;
  for (const auto& output : outputs[0])
    records.emplace_back(static_cast<const char*>(output.data_ptr()));
  return records;
}

std::vector<ShmProcessGroup::AllocationStatus> ShmProcessGroup::exchange_statuses(
    const AllocationStatus& mine) {
  at::Tensor input = at::tensor({mine.failed_step, mine.peer, mine.error_number}, at::kInt);
  std::vector<at::Tensor> inputs{input};
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int r = 0; r < size_; ++r) outputs[0].push_back(at::zeros({3}, at::kInt));
  allgather(outputs, inputs, c10d::AllgatherOptions())->wait();
  std::vector<AllocationStatus> statuses;
  for (const auto& output : outputs[0]) {
    const int32_t* v = output.data_ptr<int32_t>();
    statuses.push_back({v[0], v[1], v[2]});
  }
  return statuses;
}

at::Tensor ShmProcessGroup::allocate_shared(int64_t numel, const at::TensorOptions& options) {
  const size_t page = 4096;
  const size_t bytes =
      std::max<size_t>(
          1, (static_cast<size_t>(numel) * options.dtype().itemsize() + page - 1) / page) *
      page;
  // 1. Create this rank's object.
  const std::string name = unique_segment_name();
  std::vector<Mapping> by_rank(size_);
  AllocationStatus status;
  try {
    by_rank[rank_] = create_mapping(name, bytes);
  } catch (const ShmSystemError& e) {
    status = {AllocationStatus::kCreateFailed, -1, e.error_number()};
  } catch (const std::exception&) {  // bad_alloc, say: still every rank's status exchange
    status = {AllocationStatus::kCreateFailed, -1, 0};
  }
  // 2. Learn every rank's name; 3. map the peers'.
  const std::vector<std::string> names = exchange(by_rank[rank_].base ? name : "");
  for (int r = 0; r < size_ && !status.failed(); ++r) {
    if (r == rank_ || names[r].empty()) continue;  // a peer that could not create says so below
    try {
      by_rank[r] = open_mapping(names[r], bytes);
    } catch (const ShmSystemError& e) {
      status = {AllocationStatus::kMapFailed, r, e.error_number()};
    } catch (const std::exception&) {
      status = {AllocationStatus::kMapFailed, r, 0};
    }
  }
  const std::vector<AllocationStatus> statuses = exchange_statuses(status);
  if (by_rank[rank_].base) ::shm_unlink(name.c_str());  // every rank has mapped it, or never will
  for (int r = 0; r < size_; ++r) {
    if (!statuses[r].failed()) continue;
    // The lowest rank that failed is the reason (a failed create makes no peer fail to map).
    last_shared_fallback_ = SharedBufferFallback{
        r,
        statuses[r].failed_step == AllocationStatus::kCreateFailed ? SharedBufferStep::kCreate
                                                                   : SharedBufferStep::kMap,
        statuses[r].peer, statuses[r].error_number};
    for (const Mapping& mapping : by_rank) {
      if (mapping.base) ::munmap(mapping.base, mapping.bytes);
    }
    return at::zeros({numel}, options);
  }
  last_shared_fallback_.reset();
  void* own_base = by_rank[rank_].base;
  shared_buffers_->add(std::move(by_rank), rank_);
  // tmpfs pages start zeroed. The deleter keeps the table alive past this group.
  return at::from_blob(
      own_base, {numel}, [buffers = shared_buffers_](void* base) { buffers->remove(base); },
      options);
}

void ShmProcessGroup::all_gather(const char* input, int64_t bytes,
                                 const std::vector<char*>& outputs, Deadline deadline) {
  const int64_t per_chunk = segment_.slot_bytes();
  for (int64_t offset = 0; offset < bytes || (bytes == 0 && offset == 0); offset += per_chunk) {
    const int64_t length = std::min(per_chunk, bytes - offset);
    chunk([&](int buffer) { std::memcpy(segment_.slot(rank_, buffer), input + offset, length); },
          nullptr,
          [&](int buffer) {
            for (int r = 0; r < size_; ++r) {
              std::memcpy(outputs[r] + offset, segment_.slot(r, buffer), length);
            }
          },
          deadline);
    if (bytes == 0) break;
  }
}

void ShmProcessGroup::broadcast_bytes(char* data, int64_t bytes, int root, Deadline deadline) {
  const int64_t per_chunk = segment_.slot_bytes();
  for (int64_t offset = 0; offset < bytes || (bytes == 0 && offset == 0); offset += per_chunk) {
    const int64_t length = std::min(per_chunk, bytes - offset);
    chunk(
        [&](int buffer) {
          if (rank_ == root) std::memcpy(segment_.slot(root, buffer), data + offset, length);
        },
        nullptr,
        [&](int buffer) {
          if (rank_ != root) std::memcpy(data + offset, segment_.slot(root, buffer), length);
        },
        deadline);
    if (bytes == 0) break;
  }
}

void ShmProcessGroup::reduce_scatter(const at::Tensor& output, const at::Tensor& input,
                                     c10d::ReduceOp op, Deadline deadline, char* predecessor_out) {
  const at::ScalarType dtype = output.scalar_type();
  const int64_t element = output.element_size();
  const int64_t total = output.numel();  // this rank's chunk of the input, and of the result
  // Each slot holds one piece per destination rank.
  const int64_t per_piece = segment_.slot_bytes() / element / size_;
  const char* in = static_cast<const char*>(input.data_ptr());
  char* out = static_cast<char*>(output.data_ptr());
  const int predecessor = (rank_ + size_ - 1) % size_;
  for (int64_t offset = 0; offset < total || (total == 0 && offset == 0); offset += per_piece) {
    const int64_t length = std::min(per_piece, total - offset);
    // This rank's own piece of its slot: written by no one in phase 1, read by its successor.
    auto own_piece = [&](int r, int buffer) {
      return segment_.slot(r, buffer) + r * length * element;
    };
    chunk(
        [&](int buffer) {
          char* slot = segment_.slot(rank_, buffer);
          for (int r = 0; r < size_; ++r) {  // this rank's own piece is read from its input
            if (r == rank_) continue;
            std::memcpy(slot + r * length * element, in + (r * total + offset) * element,
                        length * element);
          }
        },
        [&](int buffer) {
          std::vector<const void*> terms;
          for (int r = 0; r < size_; ++r) {
            terms.push_back(r == rank_ ? in + (r * total + offset) * element
                                       : segment_.slot(r, buffer) + rank_ * length * element);
          }
          std::vector<void*> outs{out + offset * element};
          if (predecessor_out) outs.push_back(own_piece(rank_, buffer));
          reduce_in_rank_order(terms, length, dtype, op, outs);
        },
        [&](int buffer) {
          if (!predecessor_out) return;
          std::memcpy(predecessor_out + offset * element, own_piece(predecessor, buffer),
                      length * element);
        },
        deadline);
    if (total == 0) break;
  }
}

c10::intrusive_ptr<c10d::Work> ShmProcessGroup::allreduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::AllreduceOptions& options) {
  const c10d::ReduceOp op = options.reduceOp;
  if (tensors.size() != 1) {
    not_served("all_reduce", detail::op_name(op), tensors.empty() ? at::Tensor() : tensors[0],
               "ddpd all-reduces one tensor per call, got " + std::to_string(tensors.size()));
  }
  at::Tensor tensor = tensors[0];
  check_reduction("all_reduce", tensor, op);
  at::Tensor work_tensor = tensor.is_contiguous() ? tensor : tensor.contiguous();
  return enqueue(
      {tensor},
      [this, tensor, work_tensor, op](Deadline deadline) mutable {
        all_reduce(work_tensor, op, deadline);
        if (!work_tensor.is_same(tensor)) tensor.copy_(work_tensor);
      },
      c10d::OpType::ALLREDUCE, options.timeout, !options.asyncOp);
}

c10::intrusive_ptr<c10d::Work> ShmProcessGroup::broadcast(std::vector<at::Tensor>& tensors,
                                                          const c10d::BroadcastOptions& options) {
  if (tensors.size() != 1) {
    not_served("broadcast", kNoOp, tensors.empty() ? at::Tensor() : tensors[0],
               "ddpd broadcasts one tensor per call, got " + std::to_string(tensors.size()));
  }
  at::Tensor tensor = tensors[0];
  check_data_move("broadcast", tensor);
  at::Tensor work_tensor = tensor.is_contiguous() ? tensor : tensor.contiguous();
  const int root = static_cast<int>(options.rootRank);
  TORCH_CHECK(root >= 0 && root < size_, "shm: broadcast root ", root, " out of range");
  return enqueue(
      {tensor},
      [this, tensor, work_tensor, root](Deadline deadline) mutable {
        broadcast_bytes(static_cast<char*>(work_tensor.data_ptr()),
                        static_cast<int64_t>(work_tensor.nbytes()), root, deadline);
        if (!work_tensor.is_same(tensor)) tensor.copy_(work_tensor);
      },
      c10d::OpType::BROADCAST, options.timeout, !options.asyncOp);
}

c10::intrusive_ptr<c10d::Work> ShmProcessGroup::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& options) {
  TORCH_CHECK(
      inputs.size() == 1 && outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
      "shm: allgather takes one input and world_size outputs");
  check_data_move("all_gather", inputs[0]);
  at::Tensor input = inputs[0].contiguous();
  std::vector<at::Tensor> targets = outputs[0];
  for (const auto& t : targets) {
    check_data_move("all_gather", t);
    check_same_dtype("all_gather", input, t);
    TORCH_CHECK(t.is_contiguous() && t.nbytes() == input.nbytes(),
                "shm: allgather outputs must be contiguous and the input's size");
  }
  return enqueue(
      targets,
      [this, input, targets](Deadline deadline) {
        std::vector<char*> pointers;
        for (const auto& t : targets) pointers.push_back(static_cast<char*>(t.data_ptr()));
        all_gather(static_cast<const char*>(input.data_ptr()), static_cast<int64_t>(input.nbytes()),
                   pointers, deadline);
      },
      c10d::OpType::ALLGATHER, options.timeout, !options.asyncOp);
}

c10::intrusive_ptr<c10d::Work> ShmProcessGroup::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& options) {
  const char* name = "all_gather_into_tensor";
  check_data_move(name, input);
  check_data_move(name, output);
  check_same_dtype(name, input, output);
  at::Tensor in = input.contiguous();
  TORCH_CHECK(output.is_contiguous() && output.nbytes() == in.nbytes() * static_cast<size_t>(size_),
              "shm: _allgather_base output must be contiguous, world_size times the input");
  at::Tensor out = output;
  return enqueue(
      {out},
      [this, in, out](Deadline deadline) {
        const int64_t bytes = static_cast<int64_t>(in.nbytes());
        std::vector<char*> pointers;
        for (int r = 0; r < size_; ++r)
          pointers.push_back(static_cast<char*>(out.data_ptr()) + r * bytes);
        all_gather(static_cast<const char*>(in.data_ptr()), bytes, pointers, deadline);
      },
      c10d::OpType::_ALLGATHER_BASE, options.timeout, !options.asyncOp);
}

c10::intrusive_ptr<c10d::Work> ShmProcessGroup::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& options) {
  const char* name = "reduce_scatter_tensor";
  const c10d::ReduceOp op = options.reduceOp;
  check_reduction(name, input, op);
  check_reduction(name, output, op);
  check_same_dtype(name, input, output);
  at::Tensor in = input.contiguous();
  TORCH_CHECK(output.is_contiguous() && in.numel() == output.numel() * size_,
              "shm: _reduce_scatter_base input must have world_size times the output's elements");
  at::Tensor out = output;
  return enqueue(
      {out}, [this, in, out, op](Deadline deadline) { reduce_scatter(out, in, op, deadline); },
      c10d::OpType::_REDUCE_SCATTER_BASE, options.timeout, !options.asyncOp);
}

c10::intrusive_ptr<c10d::Work> ShmProcessGroup::reduce_scatter_keeping_predecessor(
    at::Tensor& output, at::Tensor& predecessor_output, const at::Tensor& input) {
  at::Tensor in = input.contiguous();
  TORCH_CHECK(
      output.is_contiguous() && predecessor_output.is_contiguous() &&
          predecessor_output.numel() == output.numel() &&
          predecessor_output.scalar_type() == output.scalar_type() &&
          in.numel() == output.numel() * size_ && in.scalar_type() == output.scalar_type(),
      "shm: reduce_scatter_keeping_predecessor needs contiguous outputs of one shape and an "
      "input of world_size times their elements");
  at::Tensor out = output;
  at::Tensor kept = predecessor_output;
  return enqueue(
      {out, kept},
      [this, in, out, kept](Deadline deadline) {
        reduce_scatter(out, in, c10d::ReduceOp::SUM, deadline, static_cast<char*>(kept.data_ptr()));
      },
      c10d::OpType::_REDUCE_SCATTER_BASE, c10d::kUnsetTimeout);
}

c10::intrusive_ptr<c10d::Work> ShmProcessGroup::barrier(const c10d::BarrierOptions& options) {
  return enqueue(
      {}, [this](Deadline deadline) { chunk(nullptr, nullptr, nullptr, deadline); },
      c10d::OpType::BARRIER, options.timeout, !options.asyncOp);
}

}  // namespace ddpd::shm
