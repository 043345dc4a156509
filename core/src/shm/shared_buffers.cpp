#include "shm/shared_buffers.h"

#include <sys/mman.h>

namespace ddpd::shm {

void SharedBuffers::add(std::vector<Mapping> by_rank, int own_rank) {
  const char* own_base = static_cast<const char*>(by_rank[own_rank].base);
  std::lock_guard<std::mutex> lock(mutex_);
  by_own_base_[own_base] = Buffer{std::move(by_rank), own_rank};
}

void SharedBuffers::remove(void* own_base) {
  Buffer buffer;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = by_own_base_.find(static_cast<const char*>(own_base));
    if (it == by_own_base_.end()) return;
    buffer = std::move(it->second);
    by_own_base_.erase(it);
  }
  for (const Mapping& mapping : buffer.by_rank) ::munmap(mapping.base, mapping.bytes);
}

std::vector<char*> SharedBuffers::find(const void* data, size_t bytes) const {
  const char* address = static_cast<const char*>(data);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = by_own_base_.upper_bound(address);
  if (it == by_own_base_.begin()) return {};
  --it;
  const Buffer& buffer = it->second;
  const size_t offset = static_cast<size_t>(address - it->first);
  if (offset + bytes > buffer.by_rank[buffer.own_rank].bytes) return {};
  std::vector<char*> by_rank;
  for (const Mapping& mapping : buffer.by_rank)
    by_rank.push_back(static_cast<char*>(mapping.base) + offset);
  return by_rank;
}

}  // namespace ddpd::shm
