// What a checkpoint says about itself, read from its metadata.json without LibTorch: the step it
// has done and the run's settings it was written with (docs/checkpoints.md). ddpctl reads it at
// submit (on the user's filesystem), the coordinator for the job's history, and a rank at start,
// so a resume that could train no step, or contradicts the checkpoint, is refused naming the
// flag to change and the value the checkpoint was written with.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ddpd/common/job_options.h"

namespace ddpd {

struct CheckpointFacts {
  std::string dir;  // the checkpoint's own directory (DIR/step-000040)
  int64_t step = 0;
  int64_t data_position = 0;  // global samples read: step × the run's --batch
  int64_t batch_size = 0;     // data_position / step; 0 when step is 0
  // The model's shape it was written with, by the flag that sets each (0: not recorded).
  struct ShapeField {
    const char* flag;
    int64_t value;
  };
  std::vector<ShapeField> shape;  // --d-model, --d-ff, --layers, --heads, --vocab
};

// The checkpoint `resume` names (as --resume: DIR/step-N, DIR holding `latest`, "latest" or
// "auto" under `checkpoint_dir`), or nullopt when it cannot be read here (another host's path,
// no checkpoint yet): the ranks resolve it and check it again at start.
std::optional<CheckpointFacts> read_checkpoint_facts(const std::string& resume,
                                                     const std::string& checkpoint_dir);

// Throws OptionError when `options` resume `facts` and could train no step: "--steps: the
// checkpoint DIR has done 40 steps, and --steps 30 is the total …" (unless --steps 0 asks for an
// evaluation only), or when --batch or the model's shape contradicts the checkpoint, suggesting
// the value it was written with ("resume with --batch 8").
void check_resume(const DdpJobOptions& options, const CheckpointFacts& facts);

}  // namespace ddpd
