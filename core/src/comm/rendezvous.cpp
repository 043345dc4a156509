#include "ddpd/core/rendezvous.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <csignal>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <thread>

#include "comm/communicator_internals.h"
#include "comm/gloo_backend.h"
#include "comm/slurm_environment.h"
#include "comm/transport.h"
#include "ddpd/common/fault_injection.h"
#include "ddpd/common/net.h"
#include "ddpd/core/communicator.h"
#include "device/device.h"
#include "shm/shm_process_group.h"

namespace ddpd {
namespace {

// An integer variable; `fallback` when unset or empty.
int int_variable(const EnvironmentLookup& lookup, const char* name, int fallback) {
  std::optional<std::string> value = lookup(name);
  if (!value || value->empty()) return fallback;
  char* end = nullptr;
  long parsed = std::strtol(value->c_str(), &end, 10);
  if (*end != '\0' || parsed < 0 || parsed > 1 << 30) {
    throw std::invalid_argument(std::string(name) + ": not a non-negative integer: '" + *value +
                                "'");
  }
  return static_cast<int>(parsed);
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

// Inside an srun step (SLURM_STEP_ID set) without torchrun's RANK: Slurm's task variables
// stand in for torchrun's. The batch script itself is not a step, so it maps nothing.
void read_slurm_task(const EnvironmentLookup& lookup, RendezvousOptions& options) {
  options.rank = int_variable(lookup, "SLURM_PROCID", 0);
  options.world_size = int_variable(lookup, "SLURM_STEP_NUM_TASKS", 0);
  if (options.world_size == 0) options.world_size = int_variable(lookup, "SLURM_NTASKS", 1);
  options.local_rank = int_variable(lookup, "SLURM_LOCALID", 0);
  if (std::optional<std::string> nodelist = lookup("SLURM_STEP_NODELIST")) {
    options.master_addr = first_host_of_nodelist(*nodelist);
  }
  if (std::optional<std::string> per_node = lookup("SLURM_STEP_TASKS_PER_NODE")) {
    std::vector<int> counts = tasks_per_node(*per_node);
    size_t node = static_cast<size_t>(int_variable(lookup, "SLURM_NODEID", 0));
    if (node < counts.size()) options.local_world_size = counts[node];
  }
  // One port per job, the same on every task without any exchange (torchrun users set
  // MASTER_PORT themselves; it still wins when set).
  int job_id = int_variable(lookup, "SLURM_JOB_ID", 0);
  options.master_port = int_variable(lookup, "MASTER_PORT", 20000 + job_id % 10000);
}

// torchrun's variables (a launcher of our own sets the same ones).
void read_torchrun_task(const EnvironmentLookup& lookup, RendezvousOptions& options) {
  if (std::optional<std::string> addr = lookup("MASTER_ADDR"); addr && !addr->empty()) {
    options.master_addr = *addr;
  }
  options.master_port = int_variable(lookup, "MASTER_PORT", options.master_port);
  options.world_size = int_variable(lookup, "WORLD_SIZE", 1);
  options.rank = int_variable(lookup, "RANK", 0);
  options.local_world_size = int_variable(
      lookup, "LOCAL_WORLD_SIZE", is_loopback(options.master_addr) ? options.world_size : 1);
  // RANK stands for LOCAL_RANK only when every rank is on this host; across hosts it would
  // pick another rank's GPU (torchrun always sets LOCAL_RANK).
  const std::optional<std::string> local_rank = lookup("LOCAL_RANK");
  if ((!local_rank || local_rank->empty()) && options.local_world_size != options.world_size) {
    throw std::invalid_argument(
        "LOCAL_RANK: not set, and RANK cannot stand for it: LOCAL_WORLD_SIZE " +
        std::to_string(options.local_world_size) + " is not WORLD_SIZE " +
        std::to_string(options.world_size) +
        " (set LOCAL_RANK to this process's index on its "
        "host, as torchrun does)");
  }
  options.local_rank = int_variable(lookup, "LOCAL_RANK", options.rank);
  const bool local_world_given = lookup("LOCAL_WORLD_SIZE").has_value();
  if (options.local_rank < 0 ||
      (local_world_given && options.local_rank >= options.local_world_size)) {
    throw std::invalid_argument("LOCAL_RANK: " + std::to_string(options.local_rank) +
                                " is not in 0.." + std::to_string(options.local_world_size - 1) +
                                " (LOCAL_WORLD_SIZE " + std::to_string(options.local_world_size) +
                                ")");
  }
  options.use_agent_store = lookup("TORCHELASTIC_USE_AGENT_STORE") == std::string("True");
}

}  // namespace

void ignore_broken_pipes() { std::signal(SIGPIPE, SIG_IGN); }

int remove_stale_shm_segments() { return shm::remove_stale_segments(); }

RendezvousOptions rendezvous_from_environment() {
  return rendezvous_from_environment([](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  });
}

RendezvousOptions rendezvous_from_environment(const EnvironmentLookup& lookup) {
  RendezvousOptions options;
  std::optional<std::string> rank = lookup("RANK");
  if ((!rank || rank->empty()) && lookup("SLURM_STEP_ID") && lookup("SLURM_PROCID")) {
    read_slurm_task(lookup, options);
  } else {
    read_torchrun_task(lookup, options);
  }
  if (options.world_size < 1) throw std::invalid_argument("WORLD_SIZE: must be >= 1");
  if (options.rank >= options.world_size) {
    throw std::invalid_argument("RANK: " + std::to_string(options.rank) +
                                " is not below WORLD_SIZE " + std::to_string(options.world_size));
  }
  if (options.master_port < 1 || options.master_port > 65535) {
    throw std::invalid_argument("MASTER_PORT: must be in 1..65535");
  }
  return options;
}

Backend backend_for(const DdpJobOptions& job) {
  return job.device == Device::kCuda ? Backend::kNccl : Backend::kGloo;
}

void apply_job_options(RendezvousOptions& options, const DdpJobOptions& job) {
  options.timeout =
      std::chrono::milliseconds(static_cast<int64_t>(job.collective_timeout_s * 1000.0));
  options.backend = backend_for(job);
  options.journal_size = static_cast<size_t>(job.journal_size);
  options.check_collectives = job.check_collectives;
  options.transport = job.transport;
  const auto injection = parse_fault_injection(job.inject, options.world_size);
  options.inject_skip_collective =
      injection && injection->kind == FaultKind::kSkipCollective && injection->rank == options.rank;
}

RendezvousOptions rendezvous_for_job(const DdpJobOptions& job) {
  RendezvousOptions options = rendezvous_from_environment();
  apply_job_options(options, job);
  validate(job, options.world_size);
  return options;
}

namespace {

// connect_generation's poll of its peers' join keys: one store round trip per poll, and a
// cancelled rank leaves within it.
constexpr auto kJoinPoll = std::chrono::milliseconds(5);

// The rendezvous store and, on rank 0, its server: the server is held by the communicator apart
// from the store its group uses, because a group that Communicator::abort() abandons keeps its
// store, and a server inside it would keep this worker's rendezvous port, which the job's
// restart reuses (EADDRINUSE).
struct RendezvousStore {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Store> server;  // rank 0's, unless torchrun's agent serves it
  // A later generation's: the job's store without its "gen<G>/" prefix (GroupWiring).
  c10::intrusive_ptr<c10d::Store> unprefixed;
};

// What the communicator keeps of its rendezvous: the store's server and unprefixed store, and
// how to make a backend of its transport again (split_group).
std::shared_ptr<const detail::GroupWiring> wiring_of(const RendezvousStore& rendezvous,
                                                     detail::BackendFactory make_backend) {
  auto wiring = std::make_shared<detail::GroupWiring>();
  wiring->make_backend = std::move(make_backend);
  wiring->server = rendezvous.server;
  wiring->unprefixed_store = rendezvous.unprefixed;
  return wiring;
}

std::string endpoint_of(const RendezvousOptions& options) {
  return options.master_addr + ":" + std::to_string(options.master_port);
}

// Opens the store at options' endpoint. A job's first group waits there for every rank
// (`wait_workers`); a later generation's ranks meet in connect_generation's own join barrier
// instead, which `stop` can end, as it can the wait for the store's port to open
// (RendezvousAbandoned).
RendezvousStore open_store(const RendezvousOptions& options, bool wait_workers = true,
                           const std::function<bool()>& stop = {}) {
  RendezvousStore out;
  // c10d's client retries a refused connection only once a second; polling for rank 0's store
  // first saves that second on every job start. A store that never comes up fails below.
  const bool serves_store = options.rank == 0 && !options.use_agent_store;
  if (!serves_store &&
      !wait_for_port(options.master_addr, options.master_port, options.timeout, stop) && stop &&
      stop()) {
    throw RendezvousAbandoned("rendezvous at " + endpoint_of(options) + ", rank " +
                              std::to_string(options.rank) +
                              ": stopped while waiting for the store to come up");
  }
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<std::uint16_t>(options.master_port);
    store_options.isServer = serves_store;
    store_options.numWorkers = options.world_size;
    store_options.waitWorkers = wait_workers;
    store_options.timeout = options.timeout;
    auto tcp = c10::make_intrusive<c10d::TCPStore>(options.master_addr, store_options);
    if (serves_store) {  // rank 0 uses the server through a client of its own
      out.server = tcp;
      store_options.isServer = false;
      store_options.waitWorkers = false;  // counted already, by the server's own client
      tcp = c10::make_intrusive<c10d::TCPStore>(options.master_addr, store_options);
    }
    out.store = c10::make_intrusive<c10d::PrefixStore>("ddpd", tcp);
  } catch (const std::exception& e) {
    throw std::runtime_error("rendezvous at " + endpoint_of(options) + " failed for rank " +
                             std::to_string(options.rank) + ": " + e.what());
  }
  return out;
}

// CPU ranks: shared memory when --transport allows and every rank can map the segment
// (transport.h), else Gloo over TCP.
std::shared_ptr<Communicator> connect_cpu(const RendezvousOptions& options,
                                          CommunicatorOptions comm_options,
                                          const RendezvousStore& rendezvous) {
  const std::string endpoint = endpoint_of(options);
  TransportChoice choice;
  try {
    choice = choose_transport(options.transport, *rendezvous.store, options.rank,
                              options.world_size, shm::kDefaultSlotBytes);
  } catch (const std::invalid_argument&) {
    throw;
  } catch (const std::exception& e) {
    throw std::runtime_error("rendezvous " + endpoint + ", rank " + std::to_string(options.rank) +
                             ": " + e.what());
  }
  comm_options.transport = choice.transport;
  comm_options.transport_note = choice.note;
  c10::intrusive_ptr<c10d::Backend> group;
  detail::BackendFactory make_backend;
  if (choice.transport == GroupTransport::kShm) {
    group = c10::make_intrusive<shm::ShmProcessGroup>(std::move(*choice.segment), options.rank,
                                                      options.world_size, options.timeout);
    // A split group's ranks share the host's cores with the whole job's.
    make_backend = [timeout = options.timeout, host_ranks = options.world_size](
                       const auto& store, int rank, int world_size) {
      TransportChoice shm =
          choose_transport(Transport::kShm, *store, rank, world_size, shm::kDefaultSlotBytes);
      return c10::intrusive_ptr<c10d::Backend>(c10::make_intrusive<shm::ShmProcessGroup>(
          std::move(*shm.segment), rank, world_size, timeout, host_ranks));
    };
  } else {
    std::string bind = options.local_address;
    if (bind.empty() && is_loopback(options.master_addr)) bind = "127.0.0.1";
    make_backend = [timeout = options.timeout, bind](const auto& store, int rank, int world_size) {
      return make_gloo_backend(store, rank, world_size, timeout, bind);
    };
    try {
      group = make_backend(rendezvous.store, options.rank, options.world_size);
    } catch (const std::exception& e) {
      throw std::runtime_error("creating the gloo process group (rendezvous " + endpoint +
                               ", rank " + std::to_string(options.rank) + ") failed: " + e.what());
    }
  }
  return std::make_shared<Communicator>(group, options.rank, options.world_size, comm_options,
                                        rendezvous.store,
                                        wiring_of(rendezvous, std::move(make_backend)));
}

std::shared_ptr<Communicator> connect_nccl(const RendezvousOptions& options,
                                           CommunicatorOptions comm_options,
                                           const RendezvousStore& rendezvous) {
  detail::BackendFactory make_backend = [timeout = options.timeout](const auto& store, int rank,
                                                                    int world_size) {
    return detail::make_nccl_group(store, rank, world_size, timeout);
  };
  try {
    auto group = make_backend(rendezvous.store, options.rank, options.world_size);
    return std::make_shared<Communicator>(group, options.rank, options.world_size, comm_options,
                                          rendezvous.store,
                                          wiring_of(rendezvous, std::move(make_backend)));
  } catch (const std::invalid_argument&) {
    throw;
  } catch (const std::exception& e) {
    throw std::runtime_error("creating the nccl process group (rendezvous " + endpoint_of(options) +
                             ", rank " + std::to_string(options.rank) + ") failed: " + e.what());
  }
}

CommunicatorOptions communicator_options(const RendezvousOptions& options) {
  // NCCL ranks each own the GPU of their local rank; Gloo ranks compute on the CPU.
  CommunicatorOptions comm_options;
  comm_options.timeout = options.timeout;
  comm_options.device =
      options.backend == Backend::kNccl ? detail::bind_cuda_device(options.local_rank) : at::kCPU;
  comm_options.journal_size = options.journal_size;
  comm_options.check_collectives = options.check_collectives;
  comm_options.inject_skip_collective = options.inject_skip_collective;
  if (options.world_size > 1) comm_options.rendezvous_endpoint = endpoint_of(options);
  return comm_options;
}

std::shared_ptr<Communicator> connect_over(const RendezvousOptions& options,
                                           const CommunicatorOptions& comm_options,
                                           const RendezvousStore& rendezvous) {
  return options.backend == Backend::kGloo ? connect_cpu(options, comm_options, rendezvous)
                                           : connect_nccl(options, comm_options, rendezvous);
}

// Protocol step 4 of connect_generation (rendezvous.h).
void await_generation(c10d::Store& store, const RendezvousOptions& options, int generation,
                      const std::function<bool()>& stop) {
  const auto key = [](int rank) { return "joined/" + std::to_string(rank); };
  store.set(key(options.rank), std::vector<uint8_t>{1});
  std::vector<std::string> keys;
  for (int r = 0; r < options.world_size; ++r) keys.push_back(key(r));
  const std::string group = "group generation " + std::to_string(generation) + " at " +
                            endpoint_of(options) + ", rank " + std::to_string(options.rank);
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;
  while (!store.check(keys)) {
    if (stop && stop()) {
      throw RendezvousAbandoned(group + ": stopped while waiting for the other ranks to join");
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string missing;
      for (int r = 0; r < options.world_size; ++r) {
        if (!store.check({key(r)})) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
      throw std::runtime_error(group + ": rank(s) " + missing + " did not join within " +
                               std::to_string(options.timeout.count() / 1000) + " s");
    }
    std::this_thread::sleep_for(kJoinPoll);
  }
}

}  // namespace

std::shared_ptr<Communicator> connect(const RendezvousOptions& options) {
  const CommunicatorOptions comm_options = communicator_options(options);
  if (options.world_size == 1) {
    return std::make_shared<Communicator>(c10::intrusive_ptr<c10d::Backend>(), 0, 1, comm_options);
  }
  return connect_over(options, comm_options, open_store(options));
}

std::shared_ptr<Communicator> connect_generation(const RendezvousOptions& options, int generation,
                                                 Communicator* previous,
                                                 const std::function<bool()>& stop) {
  if (previous) previous->abort();
  const CommunicatorOptions comm_options = communicator_options(options);
  if (options.world_size == 1) {
    return std::make_shared<Communicator>(c10::intrusive_ptr<c10d::Backend>(), 0, 1, comm_options);
  }
  RendezvousStore rendezvous;
  const detail::GroupWiring* kept =
      previous ? detail::CommunicatorAccess::wiring(*previous) : nullptr;
  if (previous && previous->store() &&
      previous->info().rendezvous_endpoint == comm_options.rendezvous_endpoint) {
    // Not the previous generation's own prefixed store: a survivor's second heal would look
    // for its peers under "gen1/gen2/" while the spare, opening the store afresh, joins "gen2/".
    rendezvous.store = kept && kept->unprefixed_store ? kept->unprefixed_store : previous->store();
    rendezvous.server = kept ? kept->server : nullptr;
  } else {
    rendezvous = open_store(options, /*wait_workers=*/false, stop);
  }
  rendezvous.unprefixed = rendezvous.store;
  rendezvous.store = c10::make_intrusive<c10d::PrefixStore>("gen" + std::to_string(generation),
                                                            rendezvous.unprefixed);
  await_generation(*rendezvous.store, options, generation, stop);
  return connect_over(options, comm_options, rendezvous);
}

}  // namespace ddpd
