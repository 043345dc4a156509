// fsdp's reduce-scatter on the Gloo TCP transport: each rank sends every peer that peer's chunk
// over Gloo's point-to-point send and recv, and sums the copies of its own chunk straight into
// its output. One file per algorithm, as gloo itself does (comm/gloo_fallbacks.h).
//
// Why not what LibTorch 2.11's Gloo offers: its _reduce_scatter_base clones the whole input and
// all-reduces the clone (N times the bytes on the wire, a buffer of the input's size), and the
// all-to-all we ran before received N chunks into a buffer of the input's size. Either way every
// unit in flight held a second unit's worth of memory: fsdp's full gradients peaked at 0.446 of
// the model (8 blocks, world 2), against 0.223 for the two units the schedule needs.
//
// Protocol (N ranks; the input is N chunks of C elements; rank r's output is chunk r summed over
// the ranks; every message of one collective carries its tag, the same on every rank):
//   1. at launch, rank r posts its N - 1 sends at once: chunk j of its input to rank j, for
//      j = r+1, r+2, ... (mod N), so that no two ranks start with the same peer. Gloo moves each
//      send's data when its receiver posts the matching recv, on Gloo's own threads;
//   2. a driver thread receives the N - 1 copies of chunk r and adds them in rank order,
//      output = ((g_0 + g_1) + g_2) + ... + g_{N-1}, g_r read from the input. The first two terms
//      need no buffer: the one that is not read from the input (g_1 on rank 0, g_0 elsewhere) is
//      received straight into the output, and the other added to it (a + b and b + a are the same
//      bits in IEEE arithmetic). Each later peer's term is received into one buffer of C elements
//      and added, so at N = 2 nothing is allocated, and beyond it one chunk;
//   3. the thread waits for its sends (the caller may then free the input) and completes the
//      work; the first failure (a recv or send that failed or outlived the timeout) completes it
//      with that error instead.
// The order of the sum is the shm transport's (shm/rank_order_sum.h), so a chunk's bits do not
// depend on the transport. Each rank sends (N - 1)/N of the input, as a ring does.
//
// Thread contract: pairwise_reduce_scatter runs on the launching thread (under the
// Communicator's launch mutex, so every rank posts its collectives in the same order); it starts
// one driver thread, which alone touches the output and the receive buffer until the returned
// work completes. The thread holds the backend, the tensors and the work until it ends, so a
// caller may drop the work early (an aborted step): the thread then ends at the timeout.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <chrono>
#include <cstdint>

namespace ddpd::detail {

// Chunks of receive buffer the reduce-scatter allocates besides its output among `world_size`
// ranks: 0 at world 2, 1 beyond.
int pairwise_reduce_scatter_buffer_chunks(int world_size);

// Launches the reduce-scatter above on `gloo` (the transport itself, not its wrappers: they saw
// it as a reduce_scatter already). `output` (contiguous, C elements) gets this rank's sum;
// `flat_input` (contiguous, world_size * C) is only read. `tag` must be the same on every rank
// and differ from the tag of any reduce-scatter still in flight on the group.
c10::intrusive_ptr<c10d::Work> pairwise_reduce_scatter(c10::intrusive_ptr<c10d::Backend> gloo,
                                                       const at::Tensor& output,
                                                       const at::Tensor& flat_input, int tag,
                                                       std::chrono::milliseconds timeout);

}  // namespace ddpd::detail
