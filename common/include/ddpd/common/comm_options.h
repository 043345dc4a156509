// Collective-benchmark options and the plain arithmetic around them (docs/metrics.md): no LibTorch,
// so the coordinator and ddpctl can validate and report comm jobs too.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ddpd/common/enum_names.h"
#include "ddpd/common/job_options.h"
#include "ddpd/common/shared_buffer_fallback.h"

namespace ddpd {

// What a comm result's row or fit measured: one collective, each call behind a barrier as
// nccl-tests times it, or all-reduces launched back to back as DDP issues its buckets (the
// per-call cost the bucket advisor uses).
enum class CommSeries { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kAllReduceBackToBack };
DDPD_ENUM_INFO(CommSeries, "collective");
CommSeries series_of(Collective collective);  // its barrier-separated series

struct CommBenchOptions {
  std::vector<Collective> collectives{Collective::kAllReduce};
  std::vector<int64_t> sizes_bytes{1 << 20, 10 << 20, 100 << 20, int64_t{1} << 30};
  CommDtype dtype = CommDtype::kFloat32;
  int warmup = 5;  // untimed iterations per size
  int iters = 20;  // timed iterations per size
  // all_reduce on buffers every rank maps (Communicator::allocate_collective_buffer), read in
  // place over the shm transport, as DDP's bucketed gradients are (nccl-tests' -R, registered
  // buffers). Elsewhere the buffers are private either way.
  bool shared_buffers = false;
};

// "1MB", "10MB", "1GB", "512KB", "4096B", "4096": binary units (1 MB = 2^20 bytes, as the
// peer's size_mb). Throws OptionError("--sizes") naming the bad entry.
int64_t parse_size(const std::string& text);
std::vector<int64_t> parse_sizes(const std::string& comma_separated);
// Throws OptionError naming the flag for no collective, sizes < 1 element or above 8 GiB,
// warmup < 0, iters < 1 (collectives and dtypes are enums, parsed where they are named).
void validate(const CommBenchOptions& options);

// nccl-tests' bus-bandwidth factor: 2(n-1)/n all_reduce, (n-1)/n all_gather and
// reduce_scatter, 1 broadcast.
double busbw_factor(Collective collective, int world_size);

struct CommRow {
  CommSeries collective = CommSeries::kAllReduce;
  int64_t size_bytes = 0;  // the per-rank buffer: all_gather's input is size/N (nccl-tests)
  std::vector<double> rank_mean_s, rank_std_s, rank_min_s, rank_max_s;  // by rank
  double time_s = 0;  // the slowest rank's mean iteration time
  double algbw_bytes_per_s = 0;
  double busbw_bytes_per_s = 0;
  bool data_ok = false;
};

// t(S) = alpha + S / beta, least squares on relative residuals over one collective's rows;
// alpha >= 0 and beta > 0 always (noisy data falls back to the bandwidth term alone).
struct LatencyBandwidthFit {
  CommSeries collective = CommSeries::kAllReduce;
  double alpha_s = 0;
  double beta_bytes_per_s = 0;
  double rms_relative_error = 0;  // of the fitted times against the measured ones
};
LatencyBandwidthFit fit_latency_bandwidth(const std::vector<int64_t>& sizes,
                                          const std::vector<double>& times_s);

// A physical ceiling in bytes/s per rank, measured by every rank at once over several trials
// after a warm-up; each trial counts its slowest rank (docs/metrics.md#ceilings).
struct Ceiling {
  double median = 0;
  double min = 0;  // the spread over trials
  double max = 0;
};

struct MemoryCeilings {
  // memcpy into another buffer: the host's copy bandwidth.
  Ceiling memcpy;
  // The buffer read and written back in place: the least memory traffic an in-place collective
  // has per rank (it reads its buffer and writes its result), so the ceiling of shared-memory
  // busbw. Faster than memcpy, which also fetches the destination's lines before writing them.
  Ceiling in_place;
};

struct CommBenchResult {
  int world_size = 1;
  GroupTransport transport = GroupTransport::kNone;
  std::string transport_note;   // why --transport auto chose gloo, if it did
  bool shared_buffers = false;  // the all-reduces read the peers' buffers in place
  // --shared-buffers asked for, and the buffers fell back to private memory: why (as data).
  std::optional<SharedBufferFallback> shared_buffers_fallback;
  std::vector<CommRow> rows;
  std::vector<LatencyBandwidthFit> fits;
  // Loopback TCP: one stream per rank, all at once (as many as a ring's), bytes/s each. The
  // ceiling of busbw over Gloo on one host.
  Ceiling loopback;
  // Memory by every rank at once, bytes/s each, by buffer size (each row's size; small buffers
  // run from cache, so the figures depend on it).
  std::map<int64_t, MemoryCeilings> memory_by_size;
};

// A rate as a fraction of a ceiling's median (0 when it was not measured).
double fraction_of(double bytes_per_s, const Ceiling& ceiling);
// What each ceiling bounds. Loopback bounds busbw: a ring sends busbw's bytes through each
// rank's one stream. The memory ceilings bound algbw: whatever the world size, a rank reads and
// writes at least its own buffer, and an all-reduce on shared buffers does no more than that, so
// its busbw may pass the in-place rate by the factor 2(N-1)/N (world 4: 6.1 GB/s against 5.5).
double fraction_of_loopback(const CommRow& row, const CommBenchResult& result);
double fraction_of_memcpy(const CommRow& row, const CommBenchResult& result);
double fraction_of_in_place(const CommRow& row, const CommBenchResult& result);
// The memory ceilings measured at a row's size (zeros when none were).
MemoryCeilings memory_ceilings_at(const CommBenchResult& result, int64_t size_bytes);
// The ceiling of the result's own transport: in-place memory for shm, loopback TCP otherwise.
Ceiling own_ceiling(const CommBenchResult& result, int64_t size_bytes);
// A transport cannot pass its own ceiling (busbw for loopback, algbw for in place); a row above
// the ceiling's best trial is flagged, not hidden: it means the ceiling was mismeasured.
bool above_own_ceiling(const CommBenchResult& result, const CommRow& row);

// A comm job: the benchmark options plus the backend, the transport and the collective timeout.
struct CommJob {
  CommBenchOptions bench;
  Backend backend = Backend::kGloo;
  Transport transport = Transport::kAuto;  // gloo backend only
  double collective_timeout_s = kDefaultCollectiveTimeoutSeconds;
};

}  // namespace ddpd
