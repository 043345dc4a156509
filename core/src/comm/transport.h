#pragma once
// Picks a CPU process group's transport at rendezvous (--transport auto|gloo|shm;
// docs/shm-transport.md). All ranks take the same decision: a group is all-shm or all-Gloo.

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <optional>
#include <string>

#include "ddpd/common/job_options.h"
#include "shm/segment.h"

namespace ddpd {

struct TransportChoice {
  GroupTransport transport = GroupTransport::kGloo;  // kGloo or kShm
  std::string note;                                  // why auto chose gloo ("" otherwise)
  std::optional<shm::Segment> segment;  // mapped (and already unlinked) when transport is kShm
};

// Protocol, through the rendezvous store (keys under transport/):
//  1. gloo requested: nothing is exchanged.
//  2. Each rank publishes its host identity (boot id and host name); unless all are equal, auto
//     chooses gloo and shm is an error naming two ranks' hosts.
//  3. Rank 0 creates the segment and publishes its name and nonce (or why it could not).
//  4. Every other rank opens and checks it, and publishes "ok" or its error.
//  5. Rank 0 unlinks the name and publishes the decision: shm when every rank mapped the
//     segment, else gloo with the first failure (a container without a shared /dev/shm).
//  6. Every rank reads the decision. shm requested but not possible throws std::runtime_error
//     with the reason; auto returns gloo with it in `note`.
TransportChoice choose_transport(Transport requested, c10d::Store& store, int rank, int world_size,
                                 int64_t slot_bytes);

}  // namespace ddpd
