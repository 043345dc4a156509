#include "shm/segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>

namespace ddpd::shm {
namespace {

constexpr uint64_t kMagic = 0x6464706473686d31ULL;  // "ddpdshm1"
constexpr size_t kHeaderBytes = 4096;
constexpr const char* kPrefix = "ddpd-shm-";

// The failed call's errno, as text and as data.
ShmSystemError system_error(const std::string& what, int error_number) {
  return ShmSystemError(what + ": " + std::strerror(error_number), error_number);
}

size_t round_up(size_t value, size_t to) { return (value + to - 1) / to * to; }

}  // namespace

uint64_t pid_namespace() {
  struct stat st {};
  if (::stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

std::string host_identity() {
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  return boot_id + "/" + host;
}

size_t Segment::size_for(int world_size, int64_t slot_bytes) {
  return kHeaderBytes + round_up(sizeof(RankControl) * world_size, 4096) +
         static_cast<size_t>(world_size) * 2 * static_cast<size_t>(slot_bytes);
}

std::string unique_segment_name() {
  std::random_device device;
  const uint64_t random = (static_cast<uint64_t>(device()) << 32) | device();
  char name[96];
  std::snprintf(name, sizeof(name), "/%s%llu-%d-%016llx", kPrefix,
                static_cast<unsigned long long>(pid_namespace()), static_cast<int>(::getpid()),
                static_cast<unsigned long long>(random));
  return name;
}

Mapping create_mapping(const std::string& name, size_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    const int error_number = errno;  // before building the message, which may allocate
    throw system_error("shm_open " + name, error_number);
  }
  // ftruncate alone only sets the size: tmpfs backs pages when first touched, so a /dev/shm too
  // small for the object (Docker's default 64 MiB) would kill a rank with SIGBUS mid-collective.
  // posix_fallocate reserves every page now and fails here instead, where the caller falls back.
  int error_number = ::ftruncate(fd, static_cast<off_t>(bytes)) == 0 ? 0 : errno;
  if (error_number == 0) error_number = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (error_number != 0) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    throw ShmSystemError("reserving " + std::to_string(bytes) + " bytes in /dev/shm: " +
                             std::strerror(error_number) + " (is /dev/shm large enough?)",
                         error_number);
  }
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int mmap_error = errno;  // before close(), which may change it
  ::close(fd);
  if (base == MAP_FAILED) {
    ::shm_unlink(name.c_str());
    throw system_error("mmap", mmap_error);
  }
  return {base, bytes};
}

Mapping open_mapping(const std::string& name, size_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    const int error_number = errno;  // before building the message, which may allocate
    throw system_error("shm_open " + name, error_number);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int error_number = errno;
    ::close(fd);
    throw system_error("fstat " + name, error_number);
  }
  if (static_cast<size_t>(st.st_size) != bytes) {
    ::close(fd);
    // Not a failed call: the object is not the one expected (EINVAL stands for that).
    throw ShmSystemError("segment " + name + " has " + std::to_string(st.st_size) +
                             " bytes, expected " + std::to_string(bytes),
                         EINVAL);
  }
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int mmap_error = errno;  // before close(), which may change it
  ::close(fd);
  if (base == MAP_FAILED) throw system_error("mmap " + name, mmap_error);
  return {base, bytes};
}

Segment Segment::create(int world_size, int64_t slot_bytes) {
  Segment segment;
  segment.name_ = unique_segment_name();
  segment.world_size_ = world_size;
  segment.slot_bytes_ = slot_bytes;
  segment.size_ = size_for(world_size, slot_bytes);
  segment.base_ = create_mapping(segment.name_, segment.size_).base;
  std::random_device device;
  SegmentHeader* header = segment.header();
  header->nonce = (static_cast<uint64_t>(device()) << 32) | device();
  header->world_size = world_size;
  header->slot_bytes = slot_bytes;
  for (int r = 0; r < world_size; ++r) new (&segment.control(r)) RankControl{};
  std::atomic_thread_fence(std::memory_order_release);
  header->magic = kMagic;
  return segment;
}

Segment Segment::open(const std::string& name, uint64_t nonce, int world_size, int64_t slot_bytes) {
  Segment segment;
  segment.name_ = name;
  segment.world_size_ = world_size;
  segment.slot_bytes_ = slot_bytes;
  segment.size_ = size_for(world_size, slot_bytes);
  segment.unlinked_ = true;  // rank 0 owns the name
  segment.base_ = open_mapping(name, segment.size_).base;
  std::atomic_thread_fence(std::memory_order_acquire);
  if (segment.header()->magic != kMagic || segment.header()->nonce != nonce) {
    throw std::runtime_error("segment " + name + " is not this group's (magic or nonce differs)");
  }
  return segment;
}

Segment::Segment(Segment&& other) noexcept { *this = std::move(other); }

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this == &other) return *this;
  release();
  base_ = other.base_;
  size_ = other.size_;
  world_size_ = other.world_size_;
  slot_bytes_ = other.slot_bytes_;
  name_ = std::move(other.name_);
  unlinked_ = other.unlinked_;
  other.base_ = nullptr;
  other.unlinked_ = true;
  return *this;
}

Segment::~Segment() { release(); }

void Segment::release() {
  unlink();
  if (base_) ::munmap(base_, size_);
  base_ = nullptr;
}

void Segment::unlink() {
  if (unlinked_ || name_.empty()) return;
  ::shm_unlink(name_.c_str());
  unlinked_ = true;
}

RankControl& Segment::control(int rank) const {
  return reinterpret_cast<RankControl*>(static_cast<char*>(base_) + kHeaderBytes)[rank];
}

char* Segment::slot(int rank, int buffer) const {
  char* data =
      static_cast<char*>(base_) + kHeaderBytes + round_up(sizeof(RankControl) * world_size_, 4096);
  return data + (static_cast<size_t>(rank) * 2 + buffer) * static_cast<size_t>(slot_bytes_);
}

int remove_stale_segments() {
  DIR* dir = ::opendir("/dev/shm");
  if (!dir) return 0;
  const uint64_t my_namespace = pid_namespace();
  const time_t now = ::time(nullptr);
  int removed = 0;
  while (dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.rfind(kPrefix, 0) != 0) continue;
    unsigned long long ns = 0;
    int pid = 0;
    if (std::sscanf(name.c_str() + std::strlen(kPrefix), "%llu-%d-", &ns, &pid) != 2) continue;
    struct stat st {};
    const bool old = ::stat(("/dev/shm/" + name).c_str(), &st) == 0 && now - st.st_mtime > 3600;
    const bool creator_gone = ns == my_namespace && ::kill(pid, 0) != 0 && errno == ESRCH;
    if ((old || creator_gone) && ::shm_unlink(("/" + name).c_str()) == 0) ++removed;
  }
  ::closedir(dir);
  return removed;
}

}  // namespace ddpd::shm
