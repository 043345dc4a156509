// c10d's split_group over a communicator's own transport: what a heal sends the state over (a
// group of two with the spare) and the edges of fsdp's ring shift (comm/ring_shift.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ddpd/core/communicator.h"

namespace ddpd {

// A communicator of `members` (ranks of `comm`'s group, ascending; rank i of the new group is
// members[i]) over the group's transport, formed through its store under "split/<tag>/". Only the
// members call it, each once per tag and generation; it blocks until every member has (the
// backend's own exchange, within the timeout). The new group has `comm`'s options and shares its
// abort(): a cancel ends its waits too. Throws std::logic_error when this rank is not a member or
// the group cannot split, and a CollectiveError (the backend's cause; a peer as the new group
// numbers it, or -1) when the group does not form, as when a member never comes within the
// timeout.
std::shared_ptr<Communicator> split_group(Communicator& comm, const std::vector<int>& members,
                                          const std::string& tag);

}  // namespace ddpd
