// Rendezvous description and process-group construction (docs/protocols.md).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "ddpd/common/job_options.h"

namespace ddpd {

class Communicator;

// Where and how ranks meet. Defaults describe a single-process run.
struct RendezvousOptions {
  std::string master_addr = "127.0.0.1";  // host of the c10d TCPStore (rank 0 serves it)
  int master_port = 29500;                // torchrun's default port
  // torchrun's agent already serves the store at MASTER_ADDR:MASTER_PORT
  // (TORCHELASTIC_USE_AGENT_STORE=True): every rank, rank 0 too, connects to it as a client.
  bool use_agent_store = false;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // selects the GPU under NCCL
  // Ranks on this host (torchrun's LOCAL_WORLD_SIZE; without it, every rank when the store is
  // on loopback, else 1): they share its memory in the admission check.
  int local_world_size = 1;
  Backend backend = Backend::kGloo;  // gloo (CPU) | nccl (CUDA builds)
  // Address this rank's Gloo transport binds to. Empty: loopback when master_addr is a loopback
  // address, else the address this host's name resolves to.
  std::string local_address;
  std::chrono::milliseconds timeout{// store connection and every collective
                                    static_cast<int64_t>(kDefaultCollectiveTimeoutSeconds * 1000)};
  // The job's defaults (job_options.h), never written again here.
  size_t journal_size = kDefaultJournalSize;  // collectives the communicator's journal keeps
  bool check_collectives = kJobDefaults.check_collectives;  // CommunicatorOptions
  // --inject skip-collective names this rank: its communicator gets the switch the fault
  // injector sets (CommunicatorOptions::inject_skip_collective).
  bool inject_skip_collective = false;
  Transport transport = kJobDefaults.transport;  // CPU groups (job_options.h: Transport)
};

// Makes a write to a connection a dead peer closed an error instead of a SIGPIPE that kills this
// process: Gloo's TCP transport writes without MSG_NOSIGNAL, so without this a rank whose peer
// died can die of the signal before its collective reports the peer's exit (Python ignores
// SIGPIPE, which is why PyTorch users never see it). Call once from main() of a program that
// runs ranks, before connect().
void ignore_broken_pipes();

// Unlinks shared-memory segments (/dev/shm/ddpd-shm-*) that crashed groups left behind: their
// creator's process is gone, or they are older than an hour. A group unlinks its segment as
// soon as every rank has mapped it, so only a crash during rendezvous leaves one. Call once at
// a program's start (ddpd-worker, ddpd-train). Returns how many were removed.
int remove_stale_shm_segments();

// Reads torchrun-style variables (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE). WORLD_SIZE unset means one process. Inside an srun step without RANK,
// Slurm's stand in: RANK = SLURM_PROCID, WORLD_SIZE = SLURM_STEP_NUM_TASKS, LOCAL_RANK =
// SLURM_LOCALID, LOCAL_WORLD_SIZE = this node's count in SLURM_STEP_TASKS_PER_NODE,
// MASTER_ADDR = the first host of SLURM_STEP_NODELIST, MASTER_PORT (unless set) = 20000 +
// SLURM_JOB_ID % 10000. Meant to be called once, at the program's entry point.
// Throws std::invalid_argument naming the variable when one is malformed.
RendezvousOptions rendezvous_from_environment();

// The same over any variable source (tests); nullopt is an unset variable.
using EnvironmentLookup = std::function<std::optional<std::string>(const std::string&)>;
RendezvousOptions rendezvous_from_environment(const EnvironmentLookup& lookup);

// The process-group backend a DDP job's device needs: gloo for cpu, nccl for cuda.
Backend backend_for(const DdpJobOptions& job);

// Sets what the job decides about its process group: the backend, the collective timeout, the
// journal size and --check-collectives. Shared by standalone runs and the worker daemon.
void apply_job_options(RendezvousOptions& options, const DdpJobOptions& job);

// rendezvous_from_environment() with the job's backend and collective timeout, after checking
// the job for that world size. Throws std::invalid_argument (OptionError for the job's fields).
RendezvousOptions rendezvous_for_job(const DdpJobOptions& job);

// Protocol: rank 0 starts a TCPStore server on master_addr:master_port and waits for
// world_size - 1 clients; every other rank connects as a client (retrying until `timeout`).
// Each rank then creates the backend's process group over that store, which exchanges the
// ranks' transport addresses through it. Returns a Communicator for world_size 1 without any
// store. Throws std::runtime_error with the endpoint and reason when rendezvous fails.
std::shared_ptr<Communicator> connect(const RendezvousOptions& options);

// Thrown by connect_generation when `stop` said so while this rank waited for the others.
class RendezvousAbandoned : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The group of generation `generation` (1, 2, …) of a job that lost a rank (docs/healing.md).
// Protocol:
//  1. `previous` (this rank's communicator of the generation before; null for the rank that
//     joins) is aborted.
//  2. The store: a rank whose previous group met at the same endpoint keeps its store connection,
//     and rank 0 keeps serving the store (its port stays bound, so a rank that regroups before
//     rank 0 has noticed the loss finds it up). Where the endpoint changed (rank 0 was the one
//     lost, and the rank that replaces it serves the store) or there is no previous group, the
//     store is opened as connect() opens it, except that `stop` is asked while its port is not
//     yet open, and c10d's own wait for every rank is skipped (step 4 waits instead).
//  3. Everything below goes under the prefix "gen<G>/" of the job's store (never of the
//     previous generation's prefix: a rank in its third generation meets a spare in "gen2/"), so
//     nothing the old group wrote, and no late message of its ranks, is read by the new one.
//  4. Each rank sets "joined/<rank>" and polls until every rank's key is there, every 5 ms
//     (kJoinPoll): `stop` is asked at each poll (a rank whose job is cancelled while a peer never
//     comes leaves at once, with RendezvousAbandoned), and `options.timeout` ends the wait with
//     a std::runtime_error naming the ranks that did not join.
//  5. The process group forms over the prefixed store: every rank is there, so the backend's
//     own exchange, which cannot be interrupted, waits on no one who is missing.
// Throws std::runtime_error as connect() does.
std::shared_ptr<Communicator> connect_generation(const RendezvousOptions& options, int generation,
                                                 Communicator* previous,
                                                 const std::function<bool()>& stop = {});

}  // namespace ddpd
