// Real Gloo ranks in one process, for the communicator's unit tests: a real TCPStore and one
// ProcessGroupGloo per rank, formed on a thread each (the constructors meet through the store).
// A rank's Communicator can split (split_group: its wiring makes Gloo backends too).
#pragma once

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "comm/communicator_internals.h"
#include "comm/gloo_backend.h"
#include "ddpd/core/communicator.h"

namespace ddpd::testing {

struct GlooRanks {
  c10::intrusive_ptr<c10d::TCPStore> server;
  std::vector<std::unique_ptr<Communicator>> comms;

  GlooRanks(int world_size, std::chrono::milliseconds timeout) : comms(world_size) {
    c10d::TCPStoreOptions options;
    options.port = 0;  // any free port
    options.isServer = true;
    options.numWorkers = world_size;
    options.waitWorkers = false;
    server = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
    std::vector<std::thread> forming;
    for (int rank = 0; rank < world_size; ++rank) {
      forming.emplace_back([this, rank, world_size, timeout] {
        c10d::TCPStoreOptions client;
        client.port = server->getPort();
        client.timeout = timeout;
        auto store = c10::make_intrusive<c10d::PrefixStore>(
            "gen0", c10::make_intrusive<c10d::TCPStore>("127.0.0.1", client));
        CommunicatorOptions options;
        options.timeout = timeout;
        auto wiring = std::make_shared<detail::GroupWiring>();
        wiring->make_backend = [timeout](const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                         int world_size) {
          return make_gloo_backend(store, rank, world_size, timeout, "127.0.0.1");
        };
        comms[rank] = std::make_unique<Communicator>(wiring->make_backend(store, rank, world_size),
                                                     rank, world_size, options, store, wiring);
      });
    }
    for (auto& t : forming) t.join();
  }
};

}  // namespace ddpd::testing
