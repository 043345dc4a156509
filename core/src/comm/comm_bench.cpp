#include "ddpd/core/comm_bench.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "ddpd/common/comm_options.h"
#include "ddpd/common/job_options.h"
#include "ddpd/common/seconds_since.h"
#include "ddpd/core/collective_buffers.h"
#include "device/device.h"

namespace ddpd {
namespace {

struct Stats {
  double mean = 0, std = 0, min = 0, max = 0;
};

Stats stats_of(const std::vector<double>& v) {
  Stats s;
  s.min = *std::min_element(v.begin(), v.end());
  s.max = *std::max_element(v.begin(), v.end());
  for (double x : v) s.mean += x / v.size();
  for (double x : v) s.std += (x - s.mean) * (x - s.mean);
  s.std = v.size() > 1 ? std::sqrt(s.std / (v.size() - 1)) : 0;
  return s;
}

// One collective at one size: its buffers, how to refill them, run it once, and check it.
class Trial {
 public:
  Trial(Collective collective, int64_t bytes, at::ScalarType dtype, bool shared_buffers,
        Communicator& comm)
      : collective_(collective), comm_(comm) {
    const int n = comm.info().world_size;
    const int64_t element = at::elementSize(dtype);
    // Whole elements, divisible by N where the collective splits the buffer.
    elements_ = std::max<int64_t>(bytes / element / n, 1) * n;
    auto options = at::TensorOptions().dtype(dtype).device(comm.info().device);
    if (collective == Collective::kAllGather) {
      input_ = at::empty({elements_ / n}, options);
      output_ = at::empty({elements_}, options);
    } else if (collective == Collective::kReduceScatter) {
      input_ = at::empty({elements_}, options);
      output_ = at::empty({elements_ / n}, options);
    } else if (collective == Collective::kAllReduce && shared_buffers) {
      input_ = allocate_collective_buffer(comm, elements_, options);
    } else {
      input_ = at::empty({elements_}, options);
    }
  }

  // Whether the all-reduce reads the peers' buffers in place.
  bool reads_in_place() const {
    return collective_ == Collective::kAllReduce && ddpd::reads_in_place(comm_, input_);
  }

  int64_t bytes() const { return elements_ * input_.element_size(); }

  // Known values: rank r contributes r + 1 (broadcast: the root's 7, others 0).
  void refill() {
    const int rank = comm_.info().rank;
    if (collective_ == Collective::kBroadcast) {
      input_.fill_(rank == 0 ? 7 : 0);
    } else {
      input_.fill_(rank + 1);
    }
  }

  void run() {
    switch (collective_) {
      case Collective::kAllReduce:
        comm_.all_reduce_sum(input_, "bench/all_reduce").wait();
        break;
      case Collective::kBroadcast:
        comm_.broadcast(input_, 0, "bench/broadcast").wait();
        break;
      case Collective::kAllGather:
        comm_.all_gather(output_, input_, "bench/all_gather").wait();
        break;
      case Collective::kReduceScatter:
        comm_.reduce_scatter_sum_async(output_, input_, "bench/reduce_scatter").wait();
        break;
    }
  }

  // After one refill() + run(): every element must hold the expected value.
  bool check() const {
    const int n = comm_.info().world_size;
    const double sum = n * (n + 1) / 2.0;
    if (collective_ == Collective::kAllReduce) return values_equal(input_, sum);
    if (collective_ == Collective::kBroadcast) return values_equal(input_, 7);
    if (collective_ == Collective::kReduceScatter) return values_equal(output_, sum);
    const int64_t chunk = output_.numel() / n;
    for (int r = 0; r < n; ++r) {
      if (!values_equal(output_.narrow(0, r * chunk, chunk), r + 1)) return false;
    }
    return true;
  }

 private:
  Collective collective_;
  Communicator& comm_;
  int64_t elements_ = 0;
  at::Tensor input_, output_;
};

// One row from every rank's iteration times and data check (gathered, as all_gather_object
// would), named `row_name`; `bus_collective` gives the bus-bandwidth factor. Throws when a
// rank's data was wrong.
CommRow gathered_row(CommSeries series, Collective bus_collective, int64_t size_bytes,
                     const std::vector<double>& times, bool ok, Communicator& comm) {
  const int n = comm.info().world_size;
  const Stats mine = stats_of(times);
  auto local = at::tensor({mine.mean, mine.std, mine.min, mine.max, ok ? 1.0 : 0.0},
                          at::TensorOptions().dtype(at::kDouble))
                   .to(comm.info().device);
  auto gathered = at::empty({5 * n}, local.options());
  comm.all_gather(gathered, local, "bench/gather_stats").wait();
  const auto all = gathered.cpu();
  CommRow row;
  row.collective = series;
  row.size_bytes = size_bytes;
  row.data_ok = true;
  for (int r = 0; r < n; ++r) {
    auto s = all.narrow(0, 5 * r, 5);
    row.rank_mean_s.push_back(s[0].item<double>());
    row.rank_std_s.push_back(s[1].item<double>());
    row.rank_min_s.push_back(s[2].item<double>());
    row.rank_max_s.push_back(s[3].item<double>());
    row.data_ok = row.data_ok && s[4].item<double>() == 1.0;
  }
  if (!row.data_ok) {
    throw std::runtime_error("data check failed: " + enum_name(series) + " of " +
                             std::to_string(size_bytes) +
                             " bytes produced wrong values on some rank");
  }
  row.time_s = *std::max_element(row.rank_mean_s.begin(), row.rank_mean_s.end());
  row.algbw_bytes_per_s = row.size_bytes / row.time_s;
  row.busbw_bytes_per_s = row.algbw_bytes_per_s * busbw_factor(bus_collective, n);
  return row;
}

// All-reduces issued the way DDP issues its buckets: `calls` asynchronous all-reduces of `bytes`
// each, launched back-to-back with no barrier between them, then waited for. The row's times are
// per call, averaged over `iters` rounds (a barrier before each round only); throws when a
// buffer does not hold the sum afterwards.
CommRow back_to_back_row(int64_t bytes, int calls, int warmup, int iters, at::ScalarType dtype,
                         Communicator& comm) {
  const int n = comm.info().world_size;
  // Whole elements divisible by N, as the other rows (the sizes stay comparable).
  const int64_t elements = std::max<int64_t>(bytes / at::elementSize(dtype) / n, 1) * n;
  std::vector<at::Tensor> buffers;
  for (int c = 0; c < calls; ++c) {
    buffers.push_back(
        at::empty({elements}, at::TensorOptions().dtype(dtype).device(comm.info().device)));
  }
  std::vector<double> times;
  detail::Timeline& timeline = comm.recorder().timeline();
  for (int i = 0; i < warmup + iters; ++i) {
    for (auto& b : buffers) b.fill_(comm.info().rank + 1);
    comm.barrier();
    comm.recorder().take_spans();
    timeline.anchor();
    const auto start = timeline.mark();
    std::vector<PendingCollective> pending;
    for (auto& b : buffers) pending.push_back(comm.all_reduce_sum(b, "bench/all_reduce_b2b"));
    for (auto& p : pending) p.wait();
    const auto end = timeline.mark();
    if (i >= warmup) times.push_back((timeline.seconds(end) - timeline.seconds(start)) / calls);
  }
  bool ok = true;
  for (const auto& b : buffers) ok = ok && values_equal(b, n * (n + 1) / 2.0);
  return gathered_row(CommSeries::kAllReduceBackToBack, Collective::kAllReduce,
                      elements * at::elementSize(dtype), times, ok, comm);
}

}  // namespace

bool values_equal(const at::Tensor& tensor, double expected) {
  // Chunked and in the tensor's own dtype (the expected values are small integers, exact in
  // float32 and bfloat16), so checking a 1 GB buffer needs no GB-sized temporaries.
  const at::Tensor flat = tensor.reshape({-1});
  constexpr int64_t kChunk = 1 << 22;
  for (int64_t start = 0; start < flat.numel(); start += kChunk) {
    const auto chunk = flat.narrow(0, start, std::min(kChunk, flat.numel() - start));
    if (chunk.ne(expected).any().item<bool>()) return false;
  }
  return true;
}

namespace {

// Per-trial rates of this rank → the slowest rank's per trial → median and spread.
// The rates travel on the communicator's device (NCCL takes no host tensor); at world size 1
// nothing travels and they are read as they are.
Ceiling slowest_over_ranks(Communicator& comm, std::vector<double> rates) {
  at::Tensor t = at::tensor(rates, at::TensorOptions().dtype(at::kDouble)).to(comm.info().device);
  comm.all_reduce(t, c10d::ReduceOp::MIN, "all_reduce/slowest_rates");
  std::vector<double> slowest = rates;
  if (comm.info().world_size > 1) {
    t = t.cpu();
    slowest.assign(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
  }
  std::sort(slowest.begin(), slowest.end());
  return {slowest[slowest.size() / 2], slowest.front(), slowest.back()};
}

// A TCP connection from this process to itself on 127.0.0.1: {sending end, receiving end}.
std::pair<int, int> loopback_pair() {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listener, 1) != 0) {
    close(listener);
    throw std::runtime_error("loopback ceiling: cannot listen on 127.0.0.1");
  }
  socklen_t len = sizeof(addr);
  getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  int sending = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(sending, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(sending);
    close(listener);
    throw std::runtime_error("loopback ceiling: cannot connect");
  }
  int receiving = accept(listener, nullptr, nullptr);
  close(listener);
  return {sending, receiving};
}

}  // namespace

Ceiling measure_loopback_ceiling(Communicator& comm, int trials) {
  const auto [sending, receiving] = loopback_pair();
  std::atomic<bool> stop{false};
  std::atomic<int64_t> received{0};
  std::thread sender([&, fd = sending] {
    std::vector<char> buf(1 << 20, 1);
    while (!stop && send(fd, buf.data(), buf.size(), MSG_NOSIGNAL) > 0) {
    }
  });
  std::thread receiver([&, fd = receiving] {
    std::vector<char> buf(1 << 20);
    for (ssize_t got; (got = recv(fd, buf.data(), buf.size(), 0)) > 0;) received += got;
  });
  comm.barrier();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // warm-up: TCP's window opens
  std::vector<double> rates;
  for (int t = 0; t < trials; ++t) {
    const int64_t before = received.load();
    const auto start = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    rates.push_back((received.load() - before) / seconds_since(start));
  }
  stop = true;
  shutdown(sending, SHUT_RDWR);
  shutdown(receiving, SHUT_RDWR);
  sender.join();
  receiver.join();
  close(sending);
  close(receiving);
  return slowest_over_ranks(comm, rates);
}

MemoryCeilings measure_memory_ceilings(Communicator& comm, int64_t bytes, int trials) {
  // Past a few caches' size the figures no longer move: 256 MiB stands for anything larger.
  // Whole groups of 8 floats, so every byte counted is moved.
  constexpr size_t kStreams = 8;
  const size_t parts = static_cast<size_t>(std::clamp<int64_t>(bytes, 4096, int64_t{256} << 20)) /
                       (sizeof(float) * kStreams);
  const size_t size = parts * kStreams * sizeof(float);
  // At least 64 MiB moved per trial, so small sizes are timed over many passes.
  const int passes = static_cast<int>(std::max<size_t>(2, (size_t{64} << 20) / size));
  // Touched before timing: no page faults in it.
  std::vector<float> from(size / sizeof(float), 1.0f), to(size / sizeof(float), 2.0f);
  std::memcpy(to.data(), from.data(), size);
  std::memcpy(to.data(), from.data(), size);
  // Every element read and written back once: the least an in-place collective does to its
  // buffer, as fast as this host does it, which takes several streams at once. On this 2-core
  // host, two processes at 100 MB: 8 interleaved streams 13.5-14.1 GB/s each, 4 streams
  // 12.9-13.7, memmove by one cache line (the ceiling until 2026-11-26, which the shared
  // all-reduce passed) 11.6-12.1, one stream 9.0-9.1.
  float* elements = to.data();
  auto in_place = [elements, parts](int) {
#pragma GCC ivdep  // the streams are disjoint parts of the buffer
    for (size_t i = 0; i < parts; ++i) {
      for (size_t s = 0; s < kStreams; ++s) elements[s * parts + i] += 1.0f;
    }
    asm volatile("" : : "r"(elements) : "memory");  // the stores count: none is dead
  };
  std::vector<double> copy_rates, in_place_rates;
  for (int t = 0; t < trials; ++t) {
    comm.barrier();  // every rank at once, as in a collective
    auto start = std::chrono::steady_clock::now();
    for (int p = 0; p < passes; ++p) std::memcpy(to.data(), from.data(), size);
    copy_rates.push_back(passes * static_cast<double>(size) / seconds_since(start));
    comm.barrier();
    start = std::chrono::steady_clock::now();
    for (int p = 0; p < passes; ++p) in_place(p);
    in_place_rates.push_back(passes * static_cast<double>(size) / seconds_since(start));
  }
  return {slowest_over_ranks(comm, copy_rates), slowest_over_ranks(comm, in_place_rates)};
}

CommBenchResult run_comm_benchmark(const CommBenchOptions& options, Communicator& comm) {
  validate(options);
  const at::ScalarType dtype = options.dtype == CommDtype::kBFloat16 ? at::kBFloat16 : at::kFloat;
  const int n = comm.info().world_size;
  CommBenchResult result;
  result.world_size = n;
  for (const auto& collective : options.collectives) {
    std::vector<int64_t> fit_sizes;
    std::vector<double> fit_times;
    for (int64_t size : options.sizes_bytes) {
      Trial trial(collective, size, dtype, options.shared_buffers, comm);
      if (trial.reads_in_place()) result.shared_buffers = true;
      if (options.shared_buffers && !result.shared_buffers_fallback) {
        result.shared_buffers_fallback = shared_buffer_fallback(comm);
      }
      for (int i = 0; i < options.warmup; ++i) {
        trial.refill();
        trial.run();
      }
      std::vector<double> times;
      detail::Timeline& timeline = comm.recorder().timeline();
      for (int i = 0; i < options.iters; ++i) {
        trial.refill();
        comm.barrier();                // every rank starts the iteration together
        comm.recorder().take_spans();  // the benchmark times iterations itself; drop the spans
        timeline.anchor();
        // Host clock on CPU; on CUDA, events around the collective in stream order (the
        // collective's completion is waited for on the stream, as nccl-tests times it).
        const auto start = timeline.mark();
        trial.run();
        const auto end = timeline.mark();
        times.push_back(timeline.seconds(end) - timeline.seconds(start));
      }
      CommRow row = gathered_row(series_of(collective), collective, trial.bytes(), times,
                                 trial.check(), comm);
      fit_sizes.push_back(row.size_bytes);
      fit_times.push_back(row.time_s);
      result.rows.push_back(std::move(row));
    }
    auto fit = fit_latency_bandwidth(fit_sizes, fit_times);
    fit.collective = series_of(collective);
    result.fits.push_back(fit);
    if (collective == Collective::kAllReduce && n > 1) {
      // The per-call overhead as DDP pays it (the bucket advisor's alpha): calls pipeline, so
      // the barrier-separated fit above overstates it. Sizes up to 64 MB, 256 MB in flight.
      std::vector<int64_t> sizes;
      std::vector<double> per_call;
      for (int64_t size : options.sizes_bytes) {
        if (size > (int64_t{64} << 20)) continue;
        const int calls = static_cast<int>(std::clamp<int64_t>((int64_t{256} << 20) / size, 2, 16));
        CommRow row = back_to_back_row(size, calls, options.warmup, options.iters, dtype, comm);
        sizes.push_back(row.size_bytes);
        per_call.push_back(row.time_s);
        result.rows.push_back(std::move(row));
      }
      if (!sizes.empty()) {
        auto pipelined = fit_latency_bandwidth(sizes, per_call);
        pipelined.collective = CommSeries::kAllReduceBackToBack;
        result.fits.push_back(pipelined);
      }
    }
  }
  // The ceilings, under the same concurrency as the collectives: every rank at once.
  result.transport = comm.info().transport;
  result.transport_note = comm.info().transport_note;
  result.loopback = measure_loopback_ceiling(comm);
  std::vector<int64_t> sizes;
  for (const auto& row : result.rows) sizes.push_back(row.size_bytes);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  for (int64_t size : sizes) result.memory_by_size[size] = measure_memory_ceilings(comm, size);
  comm.barrier();
  return result;
}

}  // namespace ddpd
