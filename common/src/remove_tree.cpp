#include "ddpd/common/remove_tree.h"

#include <ftw.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>

namespace ddpd {
namespace {

// nftw's callback cannot capture: the failing path and errno of the walk in progress (one walk
// at a time per thread).
thread_local std::string failed_path;
thread_local int failed_errno = 0;

int remove_entry(const char* path, const struct stat*, int, struct FTW*) {
  if (std::remove(path) == 0) return 0;
  failed_path = path;
  failed_errno = errno;
  return 1;  // stops the walk
}

}  // namespace

void remove_tree(const std::string& path, std::error_code& error) noexcept {
  error.clear();
  struct stat info;
  if (lstat(path.c_str(), &info) != 0) {
    if (errno != ENOENT) error.assign(errno, std::generic_category());
    return;
  }
  failed_errno = 0;
  failed_path.clear();
  // Children before their directory (FTW_DEPTH); links removed, not followed (FTW_PHYS).
  const int walked = nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  if (walked != 0) error.assign(failed_errno != 0 ? failed_errno : errno, std::generic_category());
}

void remove_tree(const std::string& path) {
  std::error_code error;
  remove_tree(path, error);
  if (error) {
    throw std::system_error(error, "removing " + (failed_path.empty() ? path : failed_path));
  }
}

}  // namespace ddpd
