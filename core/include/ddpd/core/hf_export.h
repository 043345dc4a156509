// A ddpd checkpoint, any strategy and world size, written as a Hugging Face model directory
// (docs/models.md): `ddpd-worker export` and `ddpctl export`, offline.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ddpd {

// The files of a Hugging Face model directory besides config.json and the weights that an export
// keeps from the model it was imported from (--init-from), so that the export loads with
// AutoTokenizer and generates as the original did.
inline const std::vector<std::string> kHfSideFiles = {"tokenizer.json",
                                                      "tokenizer_config.json",
                                                      "special_tokens_map.json",
                                                      "tokenizer.model",
                                                      "vocab.json",
                                                      "merges.txt",
                                                      "added_tokens.json",
                                                      "generation_config.json"};

// Copies those of kHfSideFiles that `from_dir` holds into `to_dir` (which exists), replacing
// them; returns the names copied. Throws std::runtime_error naming the file that cannot be
// copied.
std::vector<std::string> copy_hf_side_files(const std::string& from_dir, const std::string& to_dir);

// Refuses (OptionError naming --hf) to write into a directory that holds anything, unless
// `force`: an export replaces config.json, the weights and the tokenizer files, and would mix its
// own with another model's shards. A missing or empty directory is fine.
void check_export_target(const std::string& out_dir, bool force);

// Reads the checkpoint `checkpoint` (DIR/step-N, or a checkpoint directory holding `latest`) and
// writes `out_dir`: config.json (the model the checkpoint records; an imported model's own
// config kept), its parameters as float32 safetensors, sharded above max_shard_bytes, and the
// side files of the --init-from directory the checkpoint records, where that directory is here.
// Returns the number of tensors written. Throws std::runtime_error naming the path of a missing
// or corrupted checkpoint file.
int export_checkpoint_to_hf(const std::string& checkpoint, const std::string& out_dir,
                            int64_t max_shard_bytes);

}  // namespace ddpd
