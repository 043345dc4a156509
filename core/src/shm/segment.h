#pragma once
// One POSIX shared-memory segment per process group (docs/shm-transport.md): a header, each
// rank's control block, then each rank's two staging slots. Created by rank 0 at rendezvous,
// opened by the others, and unlinked by rank 0 as soon as every rank has mapped it, so a crash
// afterwards leaves nothing in /dev/shm; the mappings live until each rank unmaps.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace ddpd::shm {

// A rank's control block, one cache line of its own (ranks spin on each other's).
struct alignas(64) RankControl {
  std::atomic<uint64_t> phase;        // phases this rank has completed (see ShmProcessGroup)
  std::atomic<int64_t> heartbeat_ns;  // CLOCK_MONOTONIC, updated every 100 ms
  std::atomic<int32_t> state;         // kJoined, kLeft
  int32_t pid;                        // in the pid namespace below
  uint64_t pid_namespace;             // inode of /proc/self/ns/pid
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared atomics must be lock-free");
constexpr int32_t kJoined = 1;
constexpr int32_t kLeft = 2;

struct SegmentHeader {
  uint64_t magic;
  uint64_t nonce;  // rank 0's random value, published through the store: the right segment
  int32_t world_size;
  int64_t slot_bytes;
};

// A mapped segment. Not thread-safe by itself: the process group owns it.
class Segment {
 public:
  // Rank 0: creates and maps a segment for `world_size` ranks with `slot_bytes` per slot, named
  // /ddpd-shm-<pid namespace>-<pid>-<random>. Throws std::runtime_error with the errno text.
  static Segment create(int world_size, int64_t slot_bytes);
  // Other ranks: opens and maps it; checks the size, magic and nonce.
  static Segment open(const std::string& name, uint64_t nonce, int world_size, int64_t slot_bytes);
  Segment() = default;
  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) noexcept;
  ~Segment();

  const std::string& name() const { return name_; }
  uint64_t nonce() const { return header()->nonce; }
  SegmentHeader* header() const { return static_cast<SegmentHeader*>(base_); }
  RankControl& control(int rank) const;
  // Slot `buffer` (0 or 1) of `rank`: slot_bytes of staging memory.
  char* slot(int rank, int buffer) const;
  int64_t slot_bytes() const { return slot_bytes_; }
  // Removes the name (idempotent); the mappings stay valid.
  void unlink();

 private:
  static size_t size_for(int world_size, int64_t slot_bytes);
  void release();  // unlink and unmap: the destructor, and move-assignment's old segment
  void* base_ = nullptr;
  size_t size_ = 0;
  int world_size_ = 0;
  int64_t slot_bytes_ = 0;
  std::string name_;
  bool unlinked_ = false;
};

// A named POSIX shared-memory object, mapped read-write and shared.
struct Mapping {
  void* base = nullptr;
  size_t bytes = 0;
};
// A failed call on a shared-memory object: the message, and the errno as data.
class ShmSystemError : public std::runtime_error {
 public:
  ShmSystemError(const std::string& what, int error_number)
      : std::runtime_error(what), error_number_(error_number) {}
  int error_number() const { return error_number_; }

 private:
  int error_number_;
};

// A fresh name, /ddpd-shm-<pid namespace>-<pid>-<random> (remove_stale_segments knows it).
std::string unique_segment_name();
// Creates `name` with every one of its `bytes` reserved in /dev/shm, and maps it. Throws
// ShmSystemError (the name removed) when /dev/shm cannot hold it or the mapping fails.
Mapping create_mapping(const std::string& name, size_t bytes);
// Maps an existing `name`; throws ShmSystemError unless it has exactly `bytes` (EINVAL then).
Mapping open_mapping(const std::string& name, size_t bytes);

// This process's pid namespace (inode of /proc/self/ns/pid; 0 when unreadable).
uint64_t pid_namespace();
// "boot id/host name": ranks that share it run on one kernel of one host.
std::string host_identity();
// Unlinks segments in /dev/shm left by processes that died before unlinking them: ones whose
// creator (same pid namespace) no longer exists, or older than an hour. Returns how many.
int remove_stale_segments();

}  // namespace ddpd::shm
