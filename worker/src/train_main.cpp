// ddpd-train: the training core alone, for machines that have LibTorch but not the daemons'
// dependencies (a GPU box with only a CUDA LibTorch). Trains one job from torchrun-style
// variables (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK) with the same flags as
// `ddpd-worker run ddp`, and prints rank 0's result as JSON.
// Exit codes: 0 succeeded, 1 the job failed, 2 bad command line, environment or device.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "ddpd/ddp_flags.h"
#include "ddpd/rendezvous.h"
#include "ddpd/result_json.h"
#include "ddpd/trainer.h"
#include "device.h"

int main(int argc, char** argv) {
  CLI::App app{"ddpd-train: one DDP job on the training core (torchrun-style environment)"};
  ddpd::DdpJobOptions options;
  ddpd::add_ddp_flags(app, options);
  std::string snapshot_path;
  app.add_option("--cuda-memory-snapshot", snapshot_path,
                 "After the last step, write the CUDA allocator's segments as JSON here "
                 "(.rankR appended when WORLD_SIZE > 1; --device cuda)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  int rank = 0;
  try {
    const auto rendezvous = ddpd::rendezvous_for_job(options);
    rank = rendezvous.rank;
    if (!snapshot_path.empty() && options.device != "cuda") {
      throw ddpd::OptionError("--cuda-memory-snapshot", "needs --device cuda");
    }
    ddpd::Trainer trainer(options, ddpd::connect(rendezvous));
    const auto result = trainer.run();
    if (!snapshot_path.empty()) {
      ddpd::detail::write_cuda_memory_snapshot(snapshot_path, rank, rendezvous.world_size);
    }
    if (rank == 0) std::cout << ddpd::to_json(result).dump() << std::endl;
    return 0;
  } catch (const std::invalid_argument& e) {  // a flag, the environment, or the device
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAILED: rank %d: %s\n", rank, e.what());
    return 1;
  }
}
