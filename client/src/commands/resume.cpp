// ddpctl resume JOB: a new job that continues JOB's latest checkpoint, at another world size,
// strategy or length if asked (docs/checkpoints.md); the coordinator links the two histories.
#include <iostream>
#include <memory>

#include "commands.h"
#include "ddpd/api/restart_policy.h"
#include "ddpd/api/spec_convert.h"

namespace ddpd::client {
namespace {

struct ResumeFlags {
  std::string job_id;
  int world_size = 0;  // 0: the job's
  std::string strategy;
  int64_t steps = 0;  // 0: the job's
  bool watch = false;
};

int resume(Commands& commands, const ResumeFlags& flags) {
  ControlClient control(commands.connection());
  const v1::Job old = control.get(flags.job_id, false).job();
  if (!old.spec().has_ddp() || old.spec().ddp().checkpoint_dir().empty()) {
    throw OptionError("job",
                      flags.job_id + " is not a DDP job with --checkpoint-dir: nothing to resume");
  }
  // Its `latest`, read by the ranks at start.
  v1::JobSpec spec = resumed_spec(old.spec(), old.spec().ddp().checkpoint_dir());
  if (flags.world_size > 0) spec.set_world_size(flags.world_size);
  if (!flags.strategy.empty()) spec.mutable_ddp()->set_strategy(flags.strategy);
  if (flags.steps > 0) spec.mutable_ddp()->set_steps(flags.steps);
  validate_spec(spec);
  const v1::Job submitted = control.submit(spec, flags.job_id);
  std::cout << submitted.job_id() << std::endl;
  return flags.watch ? follow_exit_code(control, submitted.job_id()) : 0;
}

}  // namespace

void add_resume_command(CLI::App& app, Commands& commands) {
  auto flags = std::make_shared<ResumeFlags>();
  auto* command = app.add_subcommand(
      "resume", "Submit a job that continues JOB's latest checkpoint (docs/checkpoints.md)");
  command->add_option("job", flags->job_id, "Job id")->required();
  command->add_option("--world-size", flags->world_size, "World size (default: JOB's)");
  command->add_option("--strategy", flags->strategy, "Strategy (default: JOB's)");
  command->add_option("--steps", flags->steps, "Total steps (default: JOB's)");
  command->add_flag("--watch", flags->watch, "Follow the job until it ends");
  commands.on(command, [&commands, flags] { return resume(commands, *flags); });
}

}  // namespace ddpd::client
