// A ddpd checkpoint, any strategy and world size, written as a Hugging Face model directory
// (docs/models.md): `ddpd-worker export` and `ddpctl export`, offline.
#pragma once

#include <cstdint>
#include <string>

namespace ddpd {

// Reads the checkpoint `checkpoint` (DIR/step-N, or a checkpoint directory holding `latest`) and
// writes `out_dir`: config.json (the model the checkpoint records; an imported model's own
// config kept) and its parameters as float32 safetensors, sharded above max_shard_bytes.
// Returns the number of tensors written. Throws std::runtime_error naming the path of a missing
// or corrupted checkpoint file.
int export_checkpoint_to_hf(const std::string& checkpoint, const std::string& out_dir,
                            int64_t max_shard_bytes);

}  // namespace ddpd
