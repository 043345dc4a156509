// ddpctl resume JOB: a new job that continues the latest checkpoint JOB wrote, at another world
// size, strategy or length if asked (docs/checkpoints.md); the coordinator links the two histories.
#include <cstdio>
#include <iostream>
#include <memory>

#include "commands.h"
#include "ddpd/api/restart_policy.h"
#include "ddpd/api/spec_convert.h"
#include "ddpd/common/checkpoint_facts.h"

namespace ddpd::client {
namespace {

struct ResumeFlags {
  std::string job_id;
  int world_size = 0;  // 0: the job's
  std::string strategy;
  int64_t steps = 0;  // 0: the job's
  bool watch = false;
};

// JOB's own last checkpoint, DIR/step-N, from its step reports (a step that wrote one reports its
// checkpoint_seconds): not `latest`, which a later job writing to the same directory moves.
// "" when none reports one (then `latest`, as before).
std::string own_checkpoint(ControlClient& control, const v1::Job& job) {
  int64_t last = 0;
  const v1::GetJobReply reply = control.get(job.job_id(), /*with_steps=*/true);
  for (const auto& s : reply.steps()) {
    if (s.checkpoint_seconds() > 0) last = std::max(last, s.step() + 1);
  }
  if (last == 0) return "";
  char name[32];
  std::snprintf(name, sizeof(name), "/step-%06lld", static_cast<long long>(last));
  return job.spec().ddp().checkpoint_dir() + name;
}

int resume(Commands& commands, const ResumeFlags& flags) {
  ControlClient control(commands.connection());
  const v1::Job old = control.get(flags.job_id, false).job();
  if (!old.spec().has_ddp() || old.spec().ddp().checkpoint_dir().empty()) {
    throw OptionError("job",
                      flags.job_id + " is not a DDP job with --checkpoint-dir: nothing to resume");
  }
  const std::string own = own_checkpoint(control, old);
  v1::JobSpec spec =
      resumed_spec(old.spec(), own.empty() ? old.spec().ddp().checkpoint_dir() : own);
  if (flags.world_size > 0) spec.set_world_size(flags.world_size);
  if (!flags.strategy.empty()) spec.mutable_ddp()->set_strategy(flags.strategy);
  if (flags.steps > 0) spec.mutable_ddp()->set_steps(flags.steps);
  validate_spec(spec);
  const DdpJobOptions options = ddp_options_of(spec);
  if (const auto facts = read_checkpoint_facts(options.resume, options.checkpoint_dir)) {
    check_resume(options, *facts);  // on the user's filesystem; the ranks check it again
  }
  const v1::Job submitted = control.submit(spec, flags.job_id);
  std::cout << submitted.job_id() << std::endl;
  return flags.watch ? follow_exit_code(control, submitted.job_id()) : 0;
}

}  // namespace

void add_resume_command(CLI::App& app, Commands& commands) {
  auto flags = std::make_shared<ResumeFlags>();
  auto* command = app.add_subcommand(
      "resume",
      "Submit a job that continues the latest checkpoint JOB wrote (docs/checkpoints.md)");
  command->add_option("job", flags->job_id, "Job id")->required();
  command->add_option("--world-size", flags->world_size, "World size (default: JOB's)");
  command->add_option("--strategy", flags->strategy, "Strategy (default: JOB's)");
  command->add_option("--steps", flags->steps, "Total steps (default: JOB's)");
  command->add_flag("--watch", flags->watch, "Follow the job until it ends");
  commands.on(command, [&commands, flags] { return resume(commands, *flags); });
}

}  // namespace ddpd::client
