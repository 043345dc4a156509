#include "comm/ring_shift.h"

#include <algorithm>
#include <stdexcept>

#include "comm/communicator_split.h"
#include "ddpd/core/collective_error.h"

namespace ddpd::detail {
namespace {

std::vector<int> edge_members(int edge, int world) {
  const int a = edge;
  const int b = (edge + 1) % world;
  return {std::min(a, b), std::max(a, b)};
}

// The edge's rank of the job's `rank`.
int rank_on_edge(int edge, int world, int rank) {
  return edge_members(edge, world)[0] == rank ? 0 : 1;
}

void wait_naming(PendingCollective& work, int peer) {
  try {
    work.wait();
  } catch (const CollectiveError& e) {
    throw CollectiveError(
        std::string(e.what()) + " (the ring edge to rank " + std::to_string(peer) + ")", e.cause(),
        e.peer_rank() >= 0 ? peer : -1);
  }
}

}  // namespace

PendingShift::PendingShift(PendingCollective first, int first_peer, PendingCollective second,
                           int second_peer)
    : first_(std::move(first)),
      second_(std::move(second)),
      first_peer_(first_peer),
      second_peer_(second_peer) {}

void PendingShift::wait() {
  wait_naming(first_, first_peer_);
  wait_naming(second_, second_peer_);
}

RingShift::RingShift(std::shared_ptr<Communicator> comm) : comm_(std::move(comm)) {
  const int world = comm_->info().world_size;
  if (world < 2) throw std::logic_error("RingShift: a ring needs two ranks or more");
  rank_ = comm_->info().rank;
  successor_ = (rank_ + 1) % world;
  predecessor_ = (rank_ + world - 1) % world;
  if (world == 2) return;
  const int out_edge = rank_;
  const int in_edge = predecessor_;
  // Ascending edge order on every rank (protocol step 1).
  for (int edge : {std::min(out_edge, in_edge), std::max(out_edge, in_edge)}) {
    auto group =
        split_group(*comm_, edge_members(edge, world), "ring_edge/" + std::to_string(edge));
    (edge == out_edge ? to_next_ : from_prev_) = std::move(group);
  }
}

PendingShift RingShift::shift(at::Tensor& send, at::Tensor& receive, const std::string& name) {
  const int world = comm_->info().world_size;
  if (world == 2) {
    // Root 0's broadcast first on both ranks (protocol step 2).
    at::Tensor& root0 = rank_ == 0 ? send : receive;
    at::Tensor& root1 = rank_ == 0 ? receive : send;
    const int peer = 1 - rank_;
    return {comm_->broadcast(root0, 0, name), peer, comm_->broadcast(root1, 1, name), peer};
  }
  PendingCollective out =
      to_next_->broadcast(send, rank_on_edge(rank_, world, rank_), name + "/to_next");
  PendingCollective in = from_prev_->broadcast(
      receive, rank_on_edge(predecessor_, world, predecessor_), name + "/from_prev");
  return {std::move(out), successor_, std::move(in), predecessor_};
}

}  // namespace ddpd::detail
