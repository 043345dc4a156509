// Collective benchmark, nccl-tests style: per size and collective, per-rank
// timings, the slowest rank's time, algbw/busbw, a data check on every run, and the α–β fit.
#pragma once

#include "ddpd/common/comm_options.h"
#include "ddpd/core/communicator.h"

namespace ddpd {

// Runs every collective at every size. A collective: every rank must call it. Throws
// std::runtime_error when a result's values are wrong (the data check) or a collective fails.
CommBenchResult run_comm_benchmark(const CommBenchOptions& options, Communicator& comm);

// The ceilings, measured by every rank of `comm` at once (collectives: every rank calls them).
// Loopback: each rank streams over its own TCP connection on 127.0.0.1 (N streams, as a ring
// has), 0.2 s of warm-up, then `trials` windows of 0.2 s. Memory: each rank moves a buffer of
// `bytes` (at most 256 MiB: DRAM-bound beyond) at least 64 MiB in all per trial, after two
// untimed copies, first as memcpy to another buffer, then in place (x += 1 on every element,
// 8 interleaved streams: every element read and written back once); small buffers stay in
// cache, as the collective's chunks do. Each trial counts its slowest rank.
Ceiling measure_loopback_ceiling(Communicator& comm, int trials = 5);
MemoryCeilings measure_memory_ceilings(Communicator& comm, int64_t bytes, int trials = 3);

// The data check: `tensor` must equal `expected` everywhere. Returns false otherwise.
bool values_equal(const at::Tensor& tensor, double expected);

}  // namespace ddpd
