// Fault injection, a job option for tests, demos and drills (docs/diagnosis.md):
//   --inject KIND:rank=R,step=S[,seconds=T][,factor=F]
//   hang  rank R stops in compute at the start of step S, for T seconds (0 or absent: until the
//         job is cancelled)
//   exit  rank R's process exits at the start of step S
//   slow  rank R's compute takes F times as long from step S on
//   skip-collective  rank R does not launch the first collective of step S, so its later
//         collectives pair with its peers' earlier ones (a desync)
//   crash-during-checkpoint  rank R's process exits halfway through writing its file of the
//         first checkpoint saved after step S
//   exit-during-heal  rank R's process exits halfway through the state transfer of a heal
//         (docs/healing.md) that resumes at step S or later: after the parameters, before the
//         optimizer state, whether it sends them or receives them
//   exit-after-update  rank R's process exits in step S right after its optimizer update, before
//         the collectives that follow it (ZeRO-1: its parameters' broadcasts), so its peers
//         have updated too and fail in them
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ddpd/common/enum_names.h"
#include "ddpd/common/job_options.h"

namespace ddpd {

// An injected fault's kind: the KIND of --inject KIND:...
enum class FaultKind {
  kHang,
  kExit,
  kSlow,
  kSkipCollective,
  kCrashDuringCheckpoint,
  kExitDuringHeal,
  kExitAfterUpdate
};
DDPD_ENUM_INFO(FaultKind, "--inject");

struct FaultInjection {
  FaultKind kind = FaultKind::kHang;
  int rank = 0;
  int64_t step = 0;
  double seconds = 0;   // hang: 0 = until cancelled
  double factor = 1.0;  // slow: compute time multiplier (> 1)
};

// Parses --inject; empty text: none. Throws OptionError("--inject", reason) naming the part
// that is wrong; checks rank < world_size when world_size > 0.
std::optional<FaultInjection> parse_fault_injection(const std::string& text, int world_size = 0);

// The canonical text of an injection (what the job's history records when it is armed).
std::string to_string(const FaultInjection& fault);

}  // namespace ddpd
