// ddpctl plan [memory | bucket]: the accounting of docs/planning.md, offline (bucket --from-job
// reads a comm job's measurements from the coordinator).
#include <memory>

#include <cstdio>
#include <iostream>

#include "commands.h"
#include "ddpd/common/job_options.h"
#include "measured_job.h"
#include "plan_command.h"
#include "whatif_report.h"

namespace ddpd::client {
namespace {

struct PlanCommandFlags {
  PlanFlags plan;
  MemoryFlags memory;
  BucketFlags bucket;
};

// The replay of a measured DDP job at each bucket size, log-spaced; the fastest predicted step
// wins (docs/whatif.md).
int plan_bucket_from_replay(Commands& commands, const BucketFlags& flags) {
  const MeasuredJob job =
      measured_job(ControlClient(commands.connection()).get(flags.job, false), "--job");
  const BucketSweep sweep = bucket_sweep(job);
  nlohmann::json rows = nlohmann::json::array();
  double best_s = 0;
  for (const auto& [mb, f] : sweep.points) {
    rows.push_back({{"bucket_mb", mb},
                    {"step_seconds", f.step_s},
                    {"exposed_comm_seconds", f.exposed_comm_s}});
    if (mb == sweep.best_mb) best_s = f.step_s;
  }
  const double best_mb = sweep.best_mb;
  if (flags.json) {
    std::cout << nlohmann::json{{"job_id", job.job_id},
                                {"recommended_bucket_mb", best_mb},
                                {"predicted_step_seconds", best_s},
                                {"replay", rows}}
                     .dump()
              << std::endl;
    return 0;
  }
  std::printf("replay of %s (%s): recommended bucket %g MB, predicted step %.1f ms\n",
              job.job_id.c_str(), configuration_line(measured_figures(job)).c_str(), best_mb,
              best_s * 1e3);
  for (const auto& row : rows) {
    std::printf("  bucket %6g MB: predicted step %7.1f ms, exposed comm %6.1f ms\n",
                row["bucket_mb"].get<double>(), row["step_seconds"].get<double>() * 1e3,
                row["exposed_comm_seconds"].get<double>() * 1e3);
  }
  return 0;
}

int plan_bucket(Commands& commands, const BucketFlags& flags) {
  if (!flags.job.empty()) return plan_bucket_from_replay(commands, flags);
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
