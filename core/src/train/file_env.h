// The file-system calls a checkpoint makes that can fail mid-write, behind one seam, as LevelDB's
// Env: the product runs on posix_file_env(); tests put their own in front of it to make ENOSPC,
// EIO and short writes happen with no root and no mount (tests/unit/checkpoint_io_test.cpp).
// Errors are errno values, returned (0: success), never read from the global errno.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace ddpd::detail {

// A file open for writing; destroying it closes it, on every path out of its scope.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  // Writes up to `n` bytes of `data`, setting `written` (which a short write leaves below n).
  virtual int write(const char* data, size_t n, size_t& written) = 0;
  virtual int sync() = 0;  // fsync
};

class FileEnv {
 public:
  virtual ~FileEnv() = default;
  // Creates (or truncates) `path` for writing.
  virtual int create(const std::string& path, std::unique_ptr<WritableFile>& file) = 0;
  // fsyncs a file or a directory (a rename's durability) by path.
  virtual int sync_path(const std::string& path, bool directory) = 0;
};

// The real file system (open, write, fsync, close). Thread-safe: it holds no state.
FileEnv& posix_file_env();

}  // namespace ddpd::detail
