#include "store_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace ddpd::coordinator {
namespace {

std::string read_holder(int fd) {
  char buffer[32] = {};
  const ssize_t n = pread(fd, buffer, sizeof(buffer) - 1, 0);
  std::string pid = n > 0 ? std::string(buffer, static_cast<size_t>(n)) : std::string();
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  return pid.empty() ? std::string("unknown") : pid;
}

}  // namespace

StoreLock::StoreLock(const std::string& db_path) {
  const std::string path = db_path + ".lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw std::runtime_error("--db: cannot open the lock file " + path + ": " +
                             std::strerror(errno));
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    const std::string holder = read_holder(fd_);
    ::close(fd_);
    fd_ = -1;
    if (error == EWOULDBLOCK) {
      throw std::runtime_error("--db: " + db_path + " is in use by another coordinator (pid " +
                               holder + ", lock " + path + "); one coordinator per store");
    }
    throw std::runtime_error("--db: cannot lock " + path + ": " + std::strerror(error));
  }
  // The lock holds without the pid too; only a refused second coordinator reads it.
  const std::string pid = std::to_string(::getpid()) + "\n";
  const bool written = ::ftruncate(fd_, 0) == 0 &&
                       ::pwrite(fd_, pid.data(), pid.size(), 0) == static_cast<ssize_t>(pid.size());
  (void)written;
}

StoreLock::~StoreLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

}  // namespace ddpd::coordinator
