#include "comm/pairwise_reduce_scatter.h"

#include <ATen/core/ivalue.h>

#include <algorithm>
#include <exception>
#include <thread>
#include <utility>
#include <vector>

#include "shm/shm_work.h"

namespace ddpd::detail {

namespace {

using Clock = std::chrono::steady_clock;

// Completed by the driver thread, as the shm group's executor completes its own; its future tells
// the recorder when (comm/collective_recorder.h).
using PairwiseWork = shm::ShmWork;

// One collective's state, owned by its driver thread.
struct Exchange {
  c10::intrusive_ptr<c10d::Backend> gloo;
  at::Tensor output;
  at::Tensor input;
  at::Tensor buffer;  // one chunk, beyond world 2; undefined at world 2
  int tag = 0;
  int rank = 0;
  int world = 0;
  Clock::time_point deadline;
  std::vector<c10::intrusive_ptr<c10d::Work>> sends;

  at::Tensor chunk(int j) const {
    const int64_t numel = output.numel();
    return input.narrow(0, j * numel, numel);
  }
  // What is left of the collective's timeout; at least 1 ms, so a late wait still fails as
  // Gloo words a timeout rather than waiting forever (0 is Gloo's "no timeout").
  std::chrono::milliseconds left() const {
    const auto rest =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    return std::max(rest, std::chrono::milliseconds(1));
  }
  void receive(at::Tensor into, int from) {
    std::vector<at::Tensor> tensors{std::move(into)};
    gloo->recv(tensors, from, tag)->wait(left());
  }
};

// Step 2 and 3 of the protocol (pairwise_reduce_scatter.h).
void sum_in_rank_order(Exchange& x) {
  const int first = x.rank == 0 ? 1 : 0;  // of g_0 and g_1, the one received
  x.receive(x.output, first);
  for (int j = 0; j < x.world; ++j) {
    if (j == first) continue;
    if (j == x.rank) {
      x.output.add_(x.chunk(j));
      continue;
    }
    x.receive(x.buffer, j);
    x.output.add_(x.buffer);
  }
  for (auto& send : x.sends) send->wait(x.left());
}

void drive(const c10::intrusive_ptr<PairwiseWork>& work, Exchange& x) {
  try {
    sum_in_rank_order(x);
  } catch (...) {
    // The input stays referenced (x) until the sends end, with an error at the deadline at the
    // latest: Gloo may still read it.
    for (auto& send : x.sends) {
      try {
        send->wait(x.left());
      } catch (...) {
      }
    }
    const std::exception_ptr error = std::current_exception();
    x = Exchange();
    work->complete(error);
    return;
  }
  // Nothing of the collective's outlives its completion: a caller that frees the input once it
  // completes (fsdp's full gradient) frees its memory then, as its accounting says.
  x = Exchange();
  work->complete(nullptr);
}

}  // namespace

int pairwise_reduce_scatter_buffer_chunks(int world_size) { return world_size > 2 ? 1 : 0; }

c10::intrusive_ptr<c10d::Work> pairwise_reduce_scatter(c10::intrusive_ptr<c10d::Backend> gloo,
                                                       const at::Tensor& output,
                                                       const at::Tensor& flat_input, int tag,
                                                       std::chrono::milliseconds timeout) {
  Exchange x;
  x.rank = gloo->getRank();
  x.world = gloo->getSize();
  x.gloo = std::move(gloo);
  x.output = output;
  x.input = flat_input;
  x.tag = tag;
  x.deadline = Clock::now() + timeout;
  if (pairwise_reduce_scatter_buffer_chunks(x.world) > 0) x.buffer = at::empty_like(output);
  // Step 1: every peer's chunk is on its way before this rank waits for anything.
  for (int k = 1; k < x.world; ++k) {
    const int peer = (x.rank + k) % x.world;
    std::vector<at::Tensor> tensors{x.chunk(peer)};
    x.sends.push_back(x.gloo->send(tensors, peer, tag));
  }
  auto work = c10::make_intrusive<PairwiseWork>(std::vector<at::Tensor>{output}, -1,
                                                c10d::OpType::REDUCE_SCATTER);
  std::thread([work, x = std::move(x)]() mutable { drive(work, x); }).detach();
  return work;
}

}  // namespace ddpd::detail
