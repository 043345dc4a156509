// Sharded checkpoints (docs/checkpoints.md): one directory per checkpoint, `step-000120/`, with
// `metadata.json` and one binary file per writing rank. Every tensor is described by its global
// shape and a list of chunks (file, byte offset, element offset, length), so a reader can take
// any element range of it whatever the layout it was saved from: that is how a checkpoint saved
// at one world size and strategy resumes at another.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/file_env.h"

namespace ddpd::detail {

constexpr int kCheckpointFormatVersion = 1;

// One rank's part of a checkpoint being written into a temporary directory.
// Thread contract: one thread.
class CheckpointShardWriter {
 public:
  // Its file and index are written through `env` (the real file system unless a test's).
  CheckpointShardWriter(const std::string& dir, int rank, FileEnv& env = posix_file_env());
  // Appends `values` (float32, any shape, read as flat) as elements [element_offset,
  // element_offset + numel) of tensor `name`, whose global shape is `shape`. `adam_step`
  // (optimizer state only) is the AdamW step count the tensor belongs to; -1: none.
  void add(const std::string& name, const std::vector<int64_t>& shape, const torch::Tensor& values,
           int64_t element_offset, int64_t adam_step = -1);
  // Writes the file and this rank's index (`rank-R.index.json`), each fsynced. After
  // `crash_after_bytes` (> 0) written bytes the process exits: the crash-during-checkpoint drill.
  void finish(int64_t crash_after_bytes = 0);

 private:
  FileEnv& env_;
  std::string dir_;
  std::string file_;  // rank-R.bin
  std::vector<torch::Tensor> pending_;
  nlohmann::json index_;  // {"file": {...}, "tensors": {name: {"shape", "adam_step", "chunks"}}}
  int64_t bytes_ = 0;
};

// Rank 0, after every rank finished: merges the indexes into metadata.json (`header` gives the
// run's fields), fsyncs, renames the temporary directory to `final_dir`, points `latest` at it
// and keeps the newest `keep` checkpoints (0: all).
void commit_checkpoint(const std::string& tmp_dir, const std::string& final_dir,
                       nlohmann::json header, int world_size, int keep,
                       FileEnv& env = posix_file_env());

// The checkpoint directory `--resume` names: DIR/step-N as is; DIR (holding `latest`) or
// "latest" (under `checkpoint_dir`) through the pointer; "auto" as "latest", or "" (start afresh)
// when there is no checkpoint yet. Throws std::runtime_error naming the path when there is none.
std::string resolve_resume(const std::string& resume, const std::string& checkpoint_dir);

// Reads a committed checkpoint. Files are checked for their recorded size when opened and for
// their checksum before their first read; a missing, truncated or corrupted file throws
// std::runtime_error naming it.
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& dir);
  const nlohmann::json& metadata() const { return metadata_; }
  bool has(const std::string& name) const;
  std::vector<int64_t> shape(const std::string& name) const;
  int64_t adam_step(const std::string& name) const;
  // The stored dtype of tensor `name`: float32, or float64 (a float64 model's verification run).
  torch::ScalarType dtype(const std::string& name) const;
  // Elements [begin, end) of tensor `name`, flat, of its stored dtype.
  torch::Tensor read(const std::string& name, int64_t begin, int64_t end);
  // Elements [begin, begin + out.numel()) into `out`, a contiguous CPU tensor of the stored dtype,
  // with no buffer between the file and it.
  void read_into(const std::string& name, int64_t begin, const torch::Tensor& out);

 private:
  void verify(const std::string& file);
  std::string dir_;
  nlohmann::json metadata_;
  std::map<std::string, bool> verified_;
};

// "step-000120".
std::string checkpoint_name(int64_t step);

}  // namespace ddpd::detail
