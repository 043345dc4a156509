// A Hugging Face model directory's weights, as transformers' save_pretrained() lays them out:
//
//   DIR/model.safetensors                    every tensor in one file, or
//   DIR/model-00001-of-0000N.safetensors     N shards (5-digit numbers), with
//   DIR/model.safetensors.index.json         {"metadata": {"total_size": <sum of tensor bytes>},
//                                             "weight_map": {"<tensor>": "<shard file>", ...}}
//
// Every file carries the metadata {"format": "pt"}. Pickled PyTorch weights
// (pytorch_model*.bin) are not read: they execute code when loaded, and need LibTorch.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hf/safetensors.h"

namespace ddpd::hf {

// Every tensor of DIR's weights, memory-mapped (SafetensorsFile). DIR/model.safetensors is read
// when present (transformers prefers it too), else the shards that
// DIR/model.safetensors.index.json lists. Throws SafetensorsError, naming the file and the
// tensor, when:
//   - neither exists (with a one-line conversion command when pytorch_model*.bin does);
//   - the index is not JSON of the shape above, or names a shard that does not exist or is not a
//     plain file name in DIR;
//   - a tensor of the index is missing from its shard, or a shard holds a tensor that the index
//     does not map to that shard.
// metadata.total_size is not checked: writers disagree on what it counts.
class SafetensorsDir {
 public:
  explicit SafetensorsDir(const std::string& dir);

  const std::string& dir() const { return dir_; }
  std::vector<std::string> names() const;  // every tensor, sorted by name
  bool contains(const std::string& name) const { return tensors_.count(name) > 0; }
  // These three throw SafetensorsError naming DIR and the tensor when it is absent.
  const TensorEntry& entry(const std::string& name) const;
  const uint8_t* data(const std::string& name) const;         // as SafetensorsFile::data
  const std::string& file_of(const std::string& name) const;  // the path of its file
  void release(const std::string& name) const;                // SafetensorsFile::release

 private:
  struct Location {
    const SafetensorsFile* file;
    const TensorEntry* entry;
  };
  const Location& locate(const std::string& name) const;
  void read_index(const std::string& index_path);
  void add_file(const std::string& path);

  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Location> tensors_;
};

// Writes `tensors` as DIR's weights (creating DIR if needed): DIR/model.safetensors when their
// bytes total at most max_shard_bytes, else shards filled greedily in the given order (a shard
// closes when the next tensor would take it past max_shard_bytes; a tensor larger than the limit
// goes alone) and the index. Tensor bytes are counted, not headers, as transformers does.
// Each file is written atomically. A previous export's index goes first (its shards may be
// overwritten next), the new index after the new shards, and the previous export's other files
// (model.safetensors, model-*-of-*.safetensors) that this one did not overwrite last: an
// interrupted export leaves the old weights, the new ones, or a directory refused for having no
// weights, never a silent mix of the two.
// Throws std::invalid_argument for a bad tensor (safetensors_header) before touching DIR,
// std::runtime_error naming the path on I/O failure.
void write_safetensors_dir(const std::string& dir, const std::vector<TensorToWrite>& tensors,
                           uint64_t max_shard_bytes);

// The file names write_safetensors_dir uses.
inline constexpr const char* kSingleWeightsFile = "model.safetensors";
inline constexpr const char* kWeightsIndexFile = "model.safetensors.index.json";
std::string shard_file_name(size_t index, size_t count);  // index from 1: model-00001-of-00003...

}  // namespace ddpd::hf
