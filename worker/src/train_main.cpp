// ddpd-train: the training core alone, for machines that have LibTorch but not the daemons'
// dependencies (a GPU box with only a CUDA LibTorch). Trains one job from torchrun-style
// variables (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK) with the same flags as
// `ddpd-worker run ddp`, and prints rank 0's result as JSON.
// Exit codes: 0 succeeded, 1 the job failed, 2 bad command line, environment or device.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "ddpd/communicator.h"
#include "ddpd/ddp_flags.h"
#include "ddpd/local_run.h"
#include "ddpd/memory_estimate.h"
#include "ddpd/rendezvous.h"
#include "ddpd/result_json.h"
#include "ddpd/trainer.h"

int main(int argc, char** argv) {
  ddpd::ignore_broken_pipes();
  ddpd::remove_stale_shm_segments();
  CLI::App app{"ddpd-train: one DDP job on the training core (torchrun-style environment)"};
  ddpd::DdpJobOptions options;
  ddpd::add_ddp_flags(app, options);
  ddpd::LocalRunOptions local;
  ddpd::add_local_run_flags(app, local);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  int rank = 0;
  std::shared_ptr<ddpd::Communicator> comm;
  try {
    const auto rendezvous = ddpd::rendezvous_for_job(options);
    rank = rendezvous.rank;
    ddpd::validate(local, options);
    ddpd::check_fits_in_memory(options, rendezvous.world_size,
                               ddpd::available_memory_bytes() / rendezvous.local_world_size,
                               "this machine's available memory per local rank");
    comm = ddpd::connect(rendezvous);
    ddpd::Trainer trainer(options, comm);
    const auto result = trainer.run();
    ddpd::finish_local_run(local, comm.get(), /*succeeded=*/true);
    if (rank == 0) std::cout << ddpd::to_json(result).dump() << std::endl;
    return 0;
  } catch (const std::invalid_argument& e) {  // a flag, the environment, or the device
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAILED: rank %d: %s\n", rank, e.what());
    const std::string dump_error = ddpd::finish_failed_local_run(local, comm.get());
    if (!dump_error.empty()) std::fprintf(stderr, "error: %s\n", dump_error.c_str());
    return 1;
  }
}
