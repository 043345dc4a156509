// ddpctl plan [memory | bucket]: the accounting of docs/planning.md, offline (bucket --from-job
// reads a comm job's measurements from the coordinator).
#include <memory>

#include "commands.h"
#include "ddpd/common/job_options.h"
#include "plan_command.h"

namespace ddpd::client {
namespace {

struct PlanCommandFlags {
  PlanFlags plan;
  MemoryFlags memory;
  BucketFlags bucket;
};

int plan_bucket(Commands& commands, const BucketFlags& flags) {
  std::string comm_result;
  if (!flags.from_job.empty()) {
    const auto reply = ControlClient(commands.connection()).get(flags.from_job, false);
    if (!reply.job().spec().has_comm() || reply.job().state() != v1::SUCCEEDED) {
      throw OptionError("--from-job", flags.from_job + " is not a succeeded comm job");
    }
    comm_result = reply.job().result_json();
  }
  print_bucket_plan(flags, comm_result);
  return 0;
}

}  // namespace

void add_plan_command(CLI::App& app, Commands& commands) {
  auto flags = std::make_shared<PlanCommandFlags>();
  auto* plan =
      app.add_subcommand("plan", "Memory, mesh and bucket-size accounting (docs/planning.md)");
  add_plan_flags(*plan, flags->plan);
  commands.on(plan, [flags] {
    print_plan(flags->plan);
    return 0;
  });
  auto* memory = plan->add_subcommand(
      "memory", "Per-rank parameters, gradients and optimizer state of each strategy");
  add_memory_flags(*memory, flags->memory);
  commands.on(memory, [flags] {
    print_memory_plan(flags->memory);
    return 0;
  });
  auto* bucket = plan->add_subcommand("bucket", "Recommend a DDP bucket size");
  add_bucket_flags(*bucket, flags->bucket);
  commands.on(bucket, [&commands, flags] { return plan_bucket(commands, flags->bucket); });
}

}  // namespace ddpd::client
