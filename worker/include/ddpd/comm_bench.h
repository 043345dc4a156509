// Collective benchmark, nccl-tests style: per size and collective, per-rank
// timings, the slowest rank's time, algbw/busbw, a data check on every run, and the α–β fit.
#pragma once

#include "ddpd/comm_options.h"
#include "ddpd/communicator.h"

namespace ddpd {

// Runs every collective at every size. A collective: every rank must call it. Throws
// std::runtime_error when a result's values are wrong (the data check) or a collective fails.
CommBenchResult run_comm_benchmark(const CommBenchOptions& options, Communicator& comm);

// Throughput of a full-duplex TCP stream over 127.0.0.1, bytes/s each way, measured for about
// `seconds`: the ceiling any socket transport (Gloo included) has on one host.
double measure_loopback_bytes_per_s(double seconds);

// The data check: `tensor` must equal `expected` everywhere. Returns false otherwise.
bool values_equal(const at::Tensor& tensor, double expected);

}  // namespace ddpd
