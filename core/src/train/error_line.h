// LibTorch's error messages as the one line a rank reports (the job's failure, the worker's
// log): what a user can act on, without LibTorch's C++ backtrace.
#pragma once

#include <string>

namespace ddpd::detail {

// The first line of `message`, "out of memory: " first when an allocation failed, and NCCL's
// cause appended where the message gives one: NCCL's errors put the call site first and the
// cause after a "Last error:" line ("Duplicate GPU detected : rank 1 and rank 0 both on CUDA
// device ..."), which the first line alone would drop.
std::string error_line(const std::string& message);

}  // namespace ddpd::detail
