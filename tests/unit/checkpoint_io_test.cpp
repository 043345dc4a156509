// Checkpoint file I/O under faults, through the FileEnv seam (core/src/train/file_env.h), with no
// root and no mount: a full disk (ENOSPC) and an I/O error (EIO) fail naming the file and close
// what they opened; short writes still write every byte, and the checkpoint reads back exactly.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cerrno>
#include <filesystem>

#include "support/process.h"
#include "train/checkpoint.h"

namespace ddpd::detail {
namespace {

// The real file system with faults in front: writes stop with ENOSPC past `space` bytes, fsync
// fails with `sync_error`, and each write takes at most `max_write` bytes. Counts open files.
class FaultyEnv final : public FileEnv {
 public:
  int64_t space = -1;    // bytes that fit in all; -1: no limit
  int sync_error = 0;    // errno for every fsync; 0: none
  size_t max_write = 0;  // 0: no short writes
  int open_files = 0;

  int create(const std::string& path, std::unique_ptr<WritableFile>& file) override {
    std::unique_ptr<WritableFile> real;
    if (const int error = posix_file_env().create(path, real)) return error;
    file = std::make_unique<File>(*this, std::move(real));
    return 0;
  }
  int sync_path(const std::string& path, bool directory) override {
    return sync_error ? sync_error : posix_file_env().sync_path(path, directory);
  }

 private:
  class File final : public WritableFile {
   public:
    File(FaultyEnv& env, std::unique_ptr<WritableFile> real) : env_(env), real_(std::move(real)) {
      ++env_.open_files;
    }
    ~File() override { --env_.open_files; }
    int write(const char* data, size_t n, size_t& written) override {
      if (env_.max_write > 0) n = std::min(n, env_.max_write);
      if (env_.space >= 0) {
        if (env_.space == 0) return ENOSPC;
        n = std::min(n, static_cast<size_t>(env_.space));
      }
      if (const int error = real_->write(data, n, written)) return error;
      if (env_.space >= 0) env_.space -= static_cast<int64_t>(written);
      return 0;
    }
    int sync() override { return env_.sync_error ? env_.sync_error : real_->sync(); }

   private:
    FaultyEnv& env_;
    std::unique_ptr<WritableFile> real_;
  };
};

// A fresh temporary checkpoint directory under `name`.
std::string fresh_dir(const std::string& name) {
  const std::string dir = testing::temp_dir() + "/checkpoint-io-" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/step-000001.tmp");
  return dir;
}

// What the trainer's header carries that the reader checks.
nlohmann::json header() { return {{"format_version", kCheckpointFormatVersion}, {"step", 1}}; }

// 1,000 + 3 float32 values in two tensors: 4,012 bytes in rank-0.bin.
void add_two_tensors(CheckpointShardWriter& writer) {
  writer.add("w", {10, 100}, torch::arange(1000, torch::kFloat32), 0);
  writer.add("b", {3}, torch::tensor({1.5f, -2.0f, 3.25f}), 0, 7);
}

TEST(CheckpointIo, ShortWritesStillWriteEveryByteAndTheCheckpointReadsBack) {
  const std::string dir = fresh_dir("short");
  FaultyEnv env;
  env.max_write = 7;  // every write short, none aligned to a float
  CheckpointShardWriter writer(dir + "/step-000001.tmp", 0, env);
  add_two_tensors(writer);
  writer.finish();
  commit_checkpoint(dir + "/step-000001.tmp", dir + "/step-000001", header(), 1, 0, env);
  EXPECT_EQ(env.open_files, 0);
  CheckpointReader reader(dir + "/step-000001");
  EXPECT_TRUE(torch::equal(reader.read("w", 0, 1000), torch::arange(1000, torch::kFloat32)));
  EXPECT_TRUE(torch::equal(reader.read("b", 0, 3), torch::tensor({1.5f, -2.0f, 3.25f})));
  EXPECT_EQ(reader.adam_step("b"), 7);
}

TEST(CheckpointIo, AFullDiskFailsNamingTheFileAndClosesIt) {
  const std::string dir = fresh_dir("enospc");
  FaultyEnv env;
  env.space = 1000;  // a quarter of the 4,012 bytes
  CheckpointShardWriter writer(dir + "/step-000001.tmp", 0, env);
  add_two_tensors(writer);
  try {
    writer.finish();
    FAIL() << "a write past the space left succeeded";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "checkpoint: cannot write '" + dir +
                                         "/step-000001.tmp/rank-0.bin': No space left on device");
  }
  EXPECT_EQ(env.open_files, 0) << "the failed write left its file open";
  EXPECT_EQ(std::filesystem::file_size(dir + "/step-000001.tmp/rank-0.bin"), 1000u);
}

TEST(CheckpointIo, AnIoErrorAtFsyncFailsTheCommitAndLeavesLatestAlone) {
  const std::string dir = fresh_dir("eio");
  FaultyEnv env;
  CheckpointShardWriter writer(dir + "/step-000001.tmp", 0, env);
  add_two_tensors(writer);
  writer.finish();
  env.sync_error = EIO;
  try {
    commit_checkpoint(dir + "/step-000001.tmp", dir + "/step-000001", header(), 1, 0, env);
    FAIL() << "a commit whose fsync failed succeeded";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "checkpoint: fsync failed for '" + dir +
                                         "/step-000001.tmp/metadata.json': Input/output error");
  }
  EXPECT_EQ(env.open_files, 0);
  EXPECT_FALSE(std::filesystem::exists(dir + "/step-000001"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/latest"));
}

}  // namespace
}  // namespace ddpd::detail
