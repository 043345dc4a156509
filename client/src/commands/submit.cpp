// ddpctl submit ddp | comm: a job from flags (and -f FILE), validated here, then submitted.
#include <iostream>
#include <memory>

#include "commands.h"
#include "ddpd/api/spec_convert.h"
#include "ddpd/common/ddp_flags.h"
#include "job_specs.h"

namespace ddpd::client {
namespace {

struct SubmitFlags {
  DdpJobOptions ddp;
  CommJob comm;
  int world_size = 1;
  bool watch = false;
  std::string job_file;
};

int submit_spec(Commands& commands, const v1::JobSpec& spec, bool watch) {
  validate_spec(spec);  // the coordinator checks again; fail fast here
  ControlClient control(commands.connection());
  const v1::Job submitted = control.submit(spec);
  std::cout << submitted.job_id() << std::endl;
  return watch ? follow_exit_code(control, submitted.job_id()) : 0;
}

}  // namespace

void add_submit_command(CLI::App& app, Commands& commands) {
  auto flags = std::make_shared<SubmitFlags>();
  auto* submit = app.add_subcommand("submit", "Submit a job");
  submit->require_subcommand(1);
  auto* ddp = submit->add_subcommand("ddp", "DDP training of the Transformer LM");
  add_ddp_flags(*ddp, flags->ddp);
  auto* comm = submit->add_subcommand("comm", "Collective benchmark");
  add_comm_job_flags(*comm, flags->comm);
  for (CLI::App* command : {ddp, comm}) {
    command->add_option("--world-size", flags->world_size, "Ranks (one worker each)")
        ->capture_default_str();
    command->add_flag("--watch", flags->watch, "Follow the job until it ends");
    add_job_file_flag(*command, flags->job_file);
  }
  commands.on(ddp, [&commands, flags, ddp] {
    apply_job_file_if_given(flags->job_file, *ddp);
    fit_default_batch(flags->ddp, *ddp, flags->world_size);
    return submit_spec(commands, ddp_spec(flags->ddp, flags->world_size), flags->watch);
  });
  commands.on(comm, [&commands, flags, comm] {
    apply_job_file_if_given(flags->job_file, *comm);
    return submit_spec(commands, comm_spec(flags->comm, flags->world_size), flags->watch);
  });
}

}  // namespace ddpd::client
