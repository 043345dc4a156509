// Runs CUDA kernel bodies on CPU threads, for testing kernels where no GPU is present: each
// block's threads are real std::threads, __syncthreads() a real barrier, __shared__ arrays
// statics that a block's threads share (blocks run one after another), dynamic shared memory a
// buffer per launch (filled with 0xff bytes, NaN in bf16 and fp16, before every block),
// atomicAdd an atomic read-modify-write.
//
// Warps: threads 32w..32w+31 form warp w, with a barrier of their own. The warp-level
// primitives of kernels/cuda/mma_primitives.cuh are replaced (DDPD_CUDA_EMULATION) by versions
// that exchange registers through the warp's scratch between two warp barriers, and so produce
// exactly the per-lane fragments the PTX ISA specifies: mma.m16n8k16 (A, B, C/D layouts),
// ldmatrix x4 (plain and .trans: each lane passes one row address), the butterfly shuffle.
// cp.async copies land at one of the two ends of the window the hardware allows, alternating by
// block: in even blocks they are queued per thread and land only when cp.async.wait_group lets
// them (a committed group beyond the N allowed in flight), so reading a tile before waiting
// reads the 0xff filler or a stale tile, and fails; in odd blocks they land at once.
// Barrier intervals: every 16-byte chunk of dynamic shared memory remembers which thread last
// read it (an ldmatrix row) and wrote it (a cp.async) in which interval between two
// __syncthreads; a read and a write (or two writes) of one chunk by different threads in one
// interval is a race the hardware may lose, whatever the emulated timing, and is counted in
// shared_memory_races(): a missing barrier before a tile is refilled shows there.
//
// What this checks: index arithmetic, bounds, masking, fragment layouts, the online softmax,
// barriers and cp.async waits placed so that no thread reads a tile before it lands, and none
// rewrites a tile another still reads in the same barrier interval.
// What it cannot check: occupancy, bank conflicts, speed, or PTX the emulation does not model
// (hardware mma accumulates in an order of its own; here in k order, in float).
//
// Include this, then the .cuh with the kernels; launch with emulate_launch().
#pragma once

// CUDA's own headers first, as CUDA wrote them; the macros below must not reach them.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <vector_types.h>

#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

// CUDA's qualifiers, as plain C++ (cuda_bf16.h's host side stays as CUDA's headers made it).
#undef __global__
#undef __device__
#undef __shared__
#define __global__
#define __device__
#define __shared__ static
#ifndef __restrict__
#define __restrict__
#endif
// mma_primitives.cuh then leaves its PTX out; the versions below stand in.
#define DDPD_CUDA_EMULATION 1

namespace ddpd::testing::emulation {
inline thread_local uint3 thread_index;
inline thread_local uint3 block_index;
inline dim3 block_dim, grid_dim;
inline std::barrier<>* block_barrier = nullptr;

// A warp's barrier and the scratch its lanes exchange registers through.
struct Warp {
  std::barrier<> sync{32};
  uint32_t words[32][6];
  const void* rows[32];
  float values[32];
};
inline thread_local Warp* this_warp = nullptr;
inline unsigned lane() { return thread_index.x % 32; }

struct AsyncCopy {
  void* to;
  const void* from;
  bool valid;
};
inline bool copies_land_at_once = false;  // this block's cp.async timing (see above)

// The barrier-interval check: a chunk's last reader and writer as (interval + 1) << 9 | thread
// (kMany: several threads), the thread's interval counted by __syncthreads.
constexpr uint64_t kMany = 511;
struct Chunk {
  std::atomic<uint64_t> read{0}, write{0};
};
inline std::unique_ptr<Chunk[]> chunks;
inline size_t chunk_count = 0;
inline char* shared_base = nullptr;
inline std::atomic<int> races{0};
inline thread_local uint64_t interval = 0;
inline uint64_t tag(uint64_t who) { return (interval + 1) << 9 | who; }
inline bool other_in_this_interval(uint64_t t) {
  return (t >> 9) == interval + 1 && (t & kMany) != thread_index.x;
}
inline Chunk* chunk_of(const void* p) {
  const auto at = static_cast<const char*>(p) - shared_base;
  if (shared_base == nullptr || at < 0 || static_cast<size_t>(at) / 16 >= chunk_count) {
    return nullptr;
  }
  return &chunks[static_cast<size_t>(at) / 16];
}
// Dekker order (publish, then look) so that of two racing threads at least one sees the other.
inline void note_read(const void* p) {
  Chunk* c = chunk_of(p);
  if (c == nullptr) return;
  uint64_t r = c->read.load();
  for (;;) {
    const uint64_t want = other_in_this_interval(r) ? tag(kMany) : tag(thread_index.x);
    if (r == want || c->read.compare_exchange_weak(r, want)) break;
  }
  if (other_in_this_interval(c->write.load())) ++races;
}
inline void note_write(const void* p) {
  Chunk* c = chunk_of(p);
  if (c == nullptr) return;
  const uint64_t before = c->write.exchange(tag(thread_index.x));
  if (other_in_this_interval(before) || other_in_this_interval(c->read.load())) ++races;
}
inline thread_local std::vector<AsyncCopy> uncommitted;
inline thread_local std::deque<std::vector<AsyncCopy>> in_flight;
}  // namespace ddpd::testing::emulation

#define threadIdx (::ddpd::testing::emulation::thread_index)
#define blockIdx (::ddpd::testing::emulation::block_index)
#define blockDim (::ddpd::testing::emulation::block_dim)
#define gridDim (::ddpd::testing::emulation::grid_dim)

inline void __syncthreads() {
  ddpd::testing::emulation::block_barrier->arrive_and_wait();
  ++ddpd::testing::emulation::interval;
}
inline float __expf(float x) { return std::exp(x); }
inline int min(int a, int b) { return a < b ? a : b; }
inline float atomicAdd(float* address, float value) {
  return std::atomic_ref<float>(*address).fetch_add(value);
}

namespace ddpd::kernels::cuda::detail {

namespace emu = ::ddpd::testing::emulation;

// One 16-bit element of a fragment register as float (low half = lower column).
inline float element(uint32_t word, int high, __nv_bfloat16) {
  uint32_t bits = (high ? word >> 16 : word & 0xffffu) << 16;
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}
inline float element(uint32_t word, int high, __half) {
  __half_raw raw;
  raw.x = static_cast<uint16_t>(high ? word >> 16 : word & 0xffffu);
  return __half2float(__half(raw));
}

// D = A B + C for the warp, each lane holding the fragments PTX's tables assign it.
template <typename T>
inline void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  emu::Warp& w = *emu::this_warp;
  const unsigned l = emu::lane();
  for (int i = 0; i < 4; ++i) w.words[l][i] = a[i];
  w.words[l][4] = b0;
  w.words[l][5] = b1;
  w.sync.arrive_and_wait();
  // A[r][k] sits in lane 4(r % 8) + (k % 8) / 2, register (r / 8) + 2 (k / 8), half k % 2;
  // B[k][n] in lane 4n + (k % 8) / 2, register 4 + k / 8, half k % 2.
  auto a_at = [&](int r, int k) {
    return element(w.words[(r % 8) * 4 + (k % 8) / 2][r / 8 + 2 * (k / 8)], k % 2, T());
  };
  auto b_at = [&](int k, int n) {
    return element(w.words[n * 4 + (k % 8) / 2][4 + k / 8], k % 2, T());
  };
  const int g = l / 4, t = l % 4;
  float out[4];
  for (int e = 0; e < 4; ++e) {
    const int r = g + (e >> 1) * 8, n = 2 * t + (e & 1);
    float sum = d[e];
    for (int k = 0; k < 16; ++k) sum += a_at(r, k) * b_at(k, n);
    out[e] = sum;
  }
  w.sync.arrive_and_wait();  // every lane has read the scratch
  for (int e = 0; e < 4; ++e) d[e] = out[e];
}

// ldmatrix.x4 (.trans): lanes 8i..8i+7 give matrix i's row addresses.
template <bool kTrans>
inline void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  emu::Warp& w = *emu::this_warp;
  const unsigned l = emu::lane();
  w.rows[l] = row;
  emu::note_read(row);
  w.sync.arrive_and_wait();
  auto at = [&](unsigned lane_of_row, unsigned column) {
    uint16_t x;
    std::memcpy(&x, static_cast<const char*>(w.rows[lane_of_row]) + 2 * column, sizeof x);
    return static_cast<uint32_t>(x);
  };
  for (unsigned i = 0; i < 4; ++i) {
    if (kTrans) {  // column l / 4, rows 2(l % 4) and 2(l % 4) + 1
      r[i] = at(i * 8 + 2 * (l % 4), l / 4) | (at(i * 8 + 2 * (l % 4) + 1, l / 4) << 16);
    } else {  // row l / 4, columns 2(l % 4) and 2(l % 4) + 1
      r[i] = at(i * 8 + l / 4, 2 * (l % 4)) | (at(i * 8 + l / 4, 2 * (l % 4) + 1) << 16);
    }
  }
  w.sync.arrive_and_wait();
}

inline void land(const emu::AsyncCopy& c) {
  if (c.valid) {
    std::memcpy(c.to, c.from, 16);
  } else {
    std::memset(c.to, 0, 16);
  }
}
inline void cp_async_16(void* shared, const void* global, bool valid) {
  emu::note_write(shared);
  if (emu::copies_land_at_once) {
    land({shared, global, valid});
  } else {
    emu::uncommitted.push_back({shared, global, valid});
  }
}
inline void cp_async_commit() {
  emu::in_flight.push_back(std::move(emu::uncommitted));
  emu::uncommitted.clear();
}
// The oldest committed groups land until at most N remain in flight.
template <int N>
inline void cp_async_wait() {
  while (emu::in_flight.size() > static_cast<size_t>(N)) {
    for (const auto& c : emu::in_flight.front()) land(c);
    emu::in_flight.pop_front();
  }
}

inline float shfl_xor(float x, int lane_mask) {
  emu::Warp& w = *emu::this_warp;
  const unsigned l = emu::lane();
  w.values[l] = x;
  w.sync.arrive_and_wait();
  const float y = w.values[l ^ static_cast<unsigned>(lane_mask)];
  w.sync.arrive_and_wait();
  return y;
}

}  // namespace ddpd::kernels::cuda::detail

namespace ddpd::testing::emulation {

inline std::vector<char> dynamic_shared;  // one launch's dynamic shared memory
inline char* dynamic_shared_memory() { return dynamic_shared.data(); }
// Races the barrier-interval check has counted since the program started.
inline int shared_memory_races() { return races.load(); }

// Runs `kernel()` as a grid of `grid` blocks of `threads` threads (a multiple of 32), block
// after block, with `shared_bytes` of dynamic shared memory (dynamic_shared_memory()).
template <typename Kernel>
void emulate_launch(dim3 grid, unsigned threads, Kernel kernel, size_t shared_bytes = 0) {
  block_dim = dim3(threads);
  grid_dim = grid;
  dynamic_shared.assign(shared_bytes, 0);
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) {
        std::fill(dynamic_shared.begin(), dynamic_shared.end(), static_cast<char>(0xff));
        copies_land_at_once = (x + y + z) % 2 == 1;
        shared_base = dynamic_shared.data();
        chunk_count = dynamic_shared.size() / 16;
        chunks = std::make_unique<Chunk[]>(chunk_count);
        std::barrier<> barrier(threads);
        block_barrier = &barrier;
        std::vector<std::unique_ptr<Warp>> warps;
        for (unsigned w = 0; w < (threads + 31) / 32; ++w)
          warps.push_back(std::make_unique<Warp>());
        std::vector<std::thread> block;
        block.reserve(threads);
        for (unsigned t = 0; t < threads; ++t) {
          block.emplace_back([&, t] {
            thread_index = make_uint3(t, 0, 0);
            block_index = make_uint3(x, y, z);
            this_warp = warps[t / 32].get();
            interval = 0;
            uncommitted.clear();
            in_flight.clear();
            kernel();
          });
        }
        for (auto& thread : block) thread.join();
      }
    }
  }
}

}  // namespace ddpd::testing::emulation
