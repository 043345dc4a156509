// The timing loop every C++ all-reduce peer of bench_torch_backend.sh shares, so Open MPI and
// oneCCL are timed as torch_backend/bench/allreduce_busbw.py times ddpd and Gloo: per size,
// check one all-reduce of (rank + 1) against W(W+1)/2, two warm-up calls, then --rounds
// rounds of iterations() calls on zeros (a sum that stays finite), each round after a barrier;
// rank 0's warm-up time caps a round at about 0.25 s (oneCCL's 64 KiB took 50 ms a call at
// world 4 on 2 cores: 1,000 calls a round made one size take minutes);
// rank 0 prints the median seconds per call as "ROW <peer> <bytes> <seconds>".
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace ddpd_bench {

struct LoopArgs {
  std::vector<size_t> sizes;  // bytes, float32 elements
  int rounds = 5;
};

// "--sizes 1024,4096 --rounds 5": the arguments allreduce_busbw.py takes, parsed the same way.
inline LoopArgs parse_loop_args(int argc, char** argv) {
  LoopArgs args;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--rounds") {
      args.rounds = std::atoi(value.c_str());
    } else if (flag == "--sizes") {
      for (size_t pos = 0; pos < value.size();) {
        size_t comma = value.find(',', pos);
        if (comma == std::string::npos) comma = value.size();
        args.sizes.push_back(std::strtoull(value.substr(pos, comma - pos).c_str(), nullptr, 10));
        pos = comma + 1;
      }
    } else {
      std::fprintf(stderr, "unknown flag %s: takes --sizes BYTES,... and --rounds N\n",
                   flag.c_str());
      std::exit(2);
    }
  }
  if (args.sizes.empty() || args.rounds < 1) {
    std::fprintf(stderr, "--sizes BYTES,... is required and --rounds must be >= 1\n");
    std::exit(2);
  }
  return args;
}

// About 64 MiB moved per round, at most about 0.25 s of calls (by the warm-up's seconds per
// call, which every rank takes from rank 0), at least 3 calls: allreduce_busbw.py's rule.
inline size_t iterations(size_t nbytes, double warm_seconds) {
  size_t by_bytes = std::min<size_t>(2000, (size_t{64} << 20) / std::max<size_t>(nbytes, 1));
  size_t by_time = size_t(0.25 / std::max(warm_seconds, 1e-9));
  return std::max<size_t>(3, std::min(by_bytes, by_time));
}

// Comm: void allreduce(float* data, size_t count); void barrier(); int rank(); int world().
// The warm-up's seconds per call travel from rank 0 as a float all-reduce (the others add 0),
// so every rank runs the same number of calls.
template <class Comm>
void run_loop(Comm& comm, const char* peer, const LoopArgs& args) {
  using clock = std::chrono::steady_clock;
  for (size_t nbytes : args.sizes) {
    size_t count = nbytes / sizeof(float);
    std::vector<float> data(count, float(comm.rank() + 1));
    comm.allreduce(data.data(), count);
    float expected = float(comm.world() * (comm.world() + 1) / 2);
    if (std::any_of(data.begin(), data.end(), [&](float x) { return x != expected; })) {
      std::fprintf(stderr, "%s: all-reduce of %zu floats gave a wrong sum\n", peer, count);
      std::exit(1);
    }
    std::fill(data.begin(), data.end(), 0.0f);
    comm.barrier();
    auto warm = clock::now();
    for (int i = 0; i < 2; ++i) comm.allreduce(data.data(), count);
    float per_call = std::chrono::duration<float>(clock::now() - warm).count() / 2;
    if (comm.rank() != 0) per_call = 0.0f;
    comm.allreduce(&per_call, 1);
    size_t iters = iterations(nbytes, per_call);
    std::vector<double> samples;
    for (int round = 0; round < args.rounds; ++round) {
      comm.barrier();
      auto start = clock::now();
      for (size_t i = 0; i < iters; ++i) comm.allreduce(data.data(), count);
      samples.push_back(std::chrono::duration<double>(clock::now() - start).count() / iters);
    }
    std::sort(samples.begin(), samples.end());
    if (comm.rank() == 0) {
      std::printf("ROW %s %zu %.9g\n", peer, nbytes, samples[samples.size() / 2]);
      std::fflush(stdout);
    }
  }
}

}  // namespace ddpd_bench
