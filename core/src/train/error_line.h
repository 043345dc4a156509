// LibTorch's errors as the one line a rank reports (the job's failure, the worker's log): what a
// user can act on, without LibTorch's C++ backtrace. The one place the words of LibTorch's
// allocator and of NCCL are read:
//  - CUDA's caching allocator throws c10::OutOfMemoryError, but the CPU allocator a plain
//    c10::Error, known only by its words ("[enforce fail at alloc_cpu.cpp:127] err == 0.
//    DefaultCPUAllocator: can't allocate memory: you tried to allocate N bytes. Error code 12
//    (Cannot allocate memory)", LibTorch 2.11);
//  - NCCL's errors put the call site first and the cause after a "Last error:" line ("Duplicate
//    GPU detected : rank 1 and rank 0 both on CUDA device ..."), which the first line alone
//    would drop.
#pragma once

#include <c10/util/Exception.h>

#include <string>

namespace ddpd::detail {

// An allocation failed: CUDA's out-of-memory error, or the CPU allocator's.
bool allocation_failed(const c10::Error& error);

// The first line of the error's message, "out of memory: " first when an allocation failed, and
// NCCL's cause appended where the message gives one.
std::string error_line(const c10::Error& error);

}  // namespace ddpd::detail
