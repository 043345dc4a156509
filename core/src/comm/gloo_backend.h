// c10d's Gloo backend, created in one place (gloo_backend.cpp says why it is kept apart).
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>

namespace ddpd {

// A Gloo backend of `world_size` ranks over `store`, with `timeout` on every collective. Its
// device binds `bind_address` (a hostname or address), or this host's name when empty.
// Two threads: one for the buckets that backward overlaps, one for the rest.
c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int world_size,
                                                    std::chrono::milliseconds timeout,
                                                    const std::string& bind_address);

}  // namespace ddpd
