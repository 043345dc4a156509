// The one-line commands on jobs and workers: list, watch JOB, cancel JOB, workers.
#include <iostream>
#include <memory>

#include "commands.h"
#include "render.h"

namespace ddpd::client {

void add_job_queries(CLI::App& app, Commands& commands) {
  auto job_id = std::make_shared<std::string>();
  auto* list = app.add_subcommand("list", "List jobs");
  commands.on(list, [&commands] {
    std::cout << jobs_table(ControlClient(commands.connection()).list());
    return 0;
  });
  auto* watch = app.add_subcommand("watch", "Follow a job's progress until it ends");
  watch->add_option("job", *job_id, "Job id")->required();
  commands.on(watch, [&commands, job_id] {
    ControlClient control(commands.connection());
    return follow_exit_code(control, *job_id);
  });
  auto* cancel = app.add_subcommand("cancel", "Cancel a pending or running job");
  cancel->add_option("job", *job_id, "Job id")->required();
  commands.on(cancel, [&commands, job_id] {
    const v1::Job cancelled = ControlClient(commands.connection()).cancel(*job_id);
    std::cout << cancelled.job_id() << " " << v1::JobState_Name(cancelled.state()) << std::endl;
    return 0;
  });
  auto* workers = app.add_subcommand("workers", "List registered workers");
  commands.on(workers, [&commands] {
    std::cout << workers_table(ControlClient(commands.connection()).workers());
    return 0;
  });
}

}  // namespace ddpd::client
