// ddpctl diagnose JOB: one row per rank (state, phase, step, collective progress, compute
// score), from the coordinator's view of a running or ended job (docs/diagnosis.md).
#include <iostream>
#include <memory>

#include "commands.h"
#include "ddpd/common/unix_time.h"
#include "render.h"

namespace ddpd::client {

void add_diagnose_command(CLI::App& app, Commands& commands) {
  struct Flags {
    std::string job_id;
    bool json = false;
  };
  auto flags = std::make_shared<Flags>();
  auto* command = app.add_subcommand(
      "diagnose", "One row per rank: state, phase, step, collective progress, compute score");
  command->add_option("job", flags->job_id, "Job id")->required();
  command->add_flag("--json", flags->json, "As JSON");
  commands.on(command, [&commands, flags] {
    const auto reply = ControlClient(commands.connection()).get(flags->job_id, false);
    const double now = unix_now();
    if (flags->json) {
      std::cout << diagnosis_json(reply.job(), now).dump() << std::endl;
    } else {
      std::cout << diagnosis_table(reply.job(), now);
    }
    return 0;
  });
}

}  // namespace ddpd::client
