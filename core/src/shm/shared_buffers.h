#pragma once
// Buffers that every rank of an shm group maps: each rank's buffer is its own POSIX
// shared-memory object, and every rank maps every peer's. An all-reduce on such a buffer reads
// the peers' data where it lies and writes the result into every rank's buffer, so each rank
// moves 2 bytes per byte of the all-reduce (read, write) instead of 4.5 at world 4 through the
// slots (docs/shm-transport.md). As NCCL's
// registered user buffers and PyTorch's symmetric memory, they are allocated collectively:
// every rank allocates the same sizes in the same order, and uses them in the same collectives.
//
// Allocation protocol (ShmProcessGroup::allocate_shared, on the caller's thread; its all-gathers
// run on the group's executor, in order with the group's collectives):
//   1. each rank creates and reserves its object (unique_segment_name) and maps it;
//   2. all-gather of the names ("" where a rank could not create);
//   3. each rank maps every peer's object; all-gather of each rank's status as data (the failed
//      step, the peer, the errno); each rank then unlinks its own name, so nothing is left in
//      /dev/shm; on any failure every rank unmaps and falls back to private memory, and the
//      lowest failing rank's status is the reason (ShmProcessGroup::last_shared_fallback).
// The mappings live until the last tensor viewing the buffer is freed.

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "shm/segment.h"

namespace ddpd::shm {

// Thread contract: add() and remove() from any thread (allocation and a tensor's deleter);
// find() from the executor. One mutex guards the table.
class SharedBuffers {
 public:
  // `by_rank[r]`: rank r's buffer as this process maps it (by_rank[own rank] is its own).
  void add(std::vector<Mapping> by_rank, int own_rank);
  // Unmaps every rank's mapping of the buffer whose own base is `own_base`.
  void remove(void* own_base);
  // Each rank's address of [data, data + bytes) when the range lies in one shared buffer (same
  // offset in every rank's); empty otherwise.
  std::vector<char*> find(const void* data, size_t bytes) const;

 private:
  struct Buffer {
    std::vector<Mapping> by_rank;
    int own_rank = 0;
  };
  mutable std::mutex mutex_;
  std::map<const char*, Buffer> by_own_base_;  // guarded by mutex_
};

}  // namespace ddpd::shm
