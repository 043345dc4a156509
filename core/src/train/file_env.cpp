#include "train/file_env.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace ddpd::detail {
namespace {

class PosixWritableFile final : public WritableFile {
 public:
  explicit PosixWritableFile(int fd) : fd_(fd) {}
  ~PosixWritableFile() override { ::close(fd_); }
  int write(const char* data, size_t n, size_t& written) override {
    for (;;) {
      const ssize_t w = ::write(fd_, data, n);
      if (w >= 0) {
        written = static_cast<size_t>(w);
        return 0;
      }
      if (errno != EINTR) return errno;
    }
  }
  int sync() override { return ::fsync(fd_) == 0 ? 0 : errno; }

 private:
  int fd_;
};

class PosixFileEnv final : public FileEnv {
 public:
  int create(const std::string& path, std::unique_ptr<WritableFile>& file) override {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return errno;
    file = std::make_unique<PosixWritableFile>(fd);
    return 0;
  }
  int sync_path(const std::string& path, bool directory) override {
    const int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
    if (fd < 0) return errno;
    const int error = ::fsync(fd) == 0 ? 0 : errno;
    ::close(fd);
    return error;
  }
};

}  // namespace

FileEnv& posix_file_env() {
  static PosixFileEnv env;
  return env;
}

}  // namespace ddpd::detail
