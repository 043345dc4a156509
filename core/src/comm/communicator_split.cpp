// Communicator::split: c10d's split_group over this group's own transport (communicator.h).
#include <algorithm>
#include <stdexcept>
#include <string>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "comm/failure_cause.h"
#include "ddpd/core/communicator.h"

namespace ddpd {

std::shared_ptr<Communicator> Communicator::split(const std::vector<int>& members,
                                                  const std::string& tag) {
  const auto me = std::find(members.begin(), members.end(), info_.rank);
  if (me == members.end()) {
    throw std::logic_error("split " + tag + ": rank " + std::to_string(info_.rank) +
                           " is not among the members");
  }
  if (!std::is_sorted(members.begin(), members.end()) ||
      std::adjacent_find(members.begin(), members.end()) != members.end() || members.front() < 0 ||
      members.back() >= info_.world_size) {
    throw std::logic_error("split " + tag + ": members must be distinct ranks of this group, " +
                           "ascending");
  }
  if (!store_ || !info_.make_backend) {
    throw std::logic_error("split " + tag + ": this group was not formed over a store");
  }
  const int rank = static_cast<int>(me - members.begin());
  const int world_size = static_cast<int>(members.size());
  CommunicatorOptions options = info_;
  // A fault injected into the job's group is not the subgroup's.
  options.skip_next_collective.reset();
  auto store = c10::make_intrusive<c10d::PrefixStore>("split/" + tag, store_);
  c10::intrusive_ptr<c10d::Backend> group;
  if (world_size > 1) {
    try {
      group = info_.make_backend(store, rank, world_size);
    } catch (const std::exception& e) {
      // Typed as a collective's failure: a member that never came (a spare that died on its
      // way in) is the cause a heal reports, with the rank its caller can name.
      const TransportFailure failure = detail::failure_of(e);
      throw CollectiveError("split " + tag + " of ranks " + std::to_string(members.front()) + ".." +
                                std::to_string(members.back()) + ", rank " +
                                std::to_string(info_.rank) + ": the group did not form (" +
                                failure.what() + ")",
                            failure.cause(), failure.peer_rank());
    }
  }
  auto out = std::make_shared<Communicator>(std::move(group), rank, world_size, std::move(options),
                                            world_size > 1 ? store : nullptr);
  out->aborted_ = aborted_;
  return out;
}

}  // namespace ddpd
