#include "comm/communicator_split.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "comm/communicator_internals.h"
#include "comm/failure_cause.h"

namespace ddpd {

std::shared_ptr<Communicator> split_group(Communicator& comm, const std::vector<int>& members,
                                          const std::string& tag) {
  const CommunicatorInfo& info = comm.info();
  const auto me = std::find(members.begin(), members.end(), info.rank);
  if (me == members.end()) {
    throw std::logic_error("split " + tag + ": rank " + std::to_string(info.rank) +
                           " is not among the members");
  }
  if (!std::is_sorted(members.begin(), members.end()) ||
      std::adjacent_find(members.begin(), members.end()) != members.end() || members.front() < 0 ||
      members.back() >= info.world_size) {
    throw std::logic_error("split " + tag + ": members must be distinct ranks of this group, " +
                           "ascending");
  }
  const detail::GroupWiring* wiring = detail::CommunicatorAccess::wiring(comm);
  if (!comm.store() || !wiring || !wiring->make_backend) {
    throw std::logic_error("split " + tag + ": this group was not formed over a store");
  }
  const int rank = static_cast<int>(me - members.begin());
  const int world_size = static_cast<int>(members.size());
  CommunicatorOptions options = info;
  // A fault injected into the job's group is not the subgroup's.
  options.inject_skip_collective = false;
  auto store = c10::make_intrusive<c10d::PrefixStore>("split/" + tag, comm.store());
  c10::intrusive_ptr<c10d::Backend> group;
  if (world_size > 1) {
    try {
      group = wiring->make_backend(store, rank, world_size);
    } catch (const std::exception& e) {
      // Typed as a collective's failure: a member that never came (a spare that died on its
      // way in) is the cause a heal reports, with the rank its caller can name.
      const TransportFailure failure = detail::failure_of(e);
      throw CollectiveError("split " + tag + " of ranks " + std::to_string(members.front()) + ".." +
                                std::to_string(members.back()) + ", rank " +
                                std::to_string(info.rank) + ": the group did not form (" +
                                failure.what() + ")",
                            failure.cause(), failure.peer_rank());
    }
  }
  // The subgroup can split in turn; the job's store server stays with the job's group.
  auto subgroup_wiring = std::make_shared<detail::GroupWiring>();
  subgroup_wiring->make_backend = wiring->make_backend;
  auto out =
      std::make_shared<Communicator>(std::move(group), rank, world_size, std::move(options),
                                     world_size > 1 ? store : nullptr, std::move(subgroup_wiring));
  detail::CommunicatorAccess::share_abort(comm, *out);
  return out;
}

}  // namespace ddpd
