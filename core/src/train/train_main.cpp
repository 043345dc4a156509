// ddpd-train: the training core alone, for machines that have LibTorch but not the daemons'
// dependencies (a GPU box with only a CUDA LibTorch). Trains one job from torchrun-style
// variables (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK) with the same flags as
// `ddpd-worker run ddp`, and prints rank 0's result (or failure) as JSON.
// Exit codes (run_standalone): 0 succeeded, 1 the job failed, 2 bad command line, environment or
// device.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "ddpd/common/ddp_flags.h"
#include "ddpd/core/local_run.h"
#include "ddpd/core/standalone_run.h"

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
  } catch (const ddpd::OptionError& e) {  // an enum flag's own check
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return ddpd::run_standalone(options, local, {/*json=*/true, nullptr});
}
