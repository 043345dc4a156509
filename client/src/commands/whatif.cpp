// ddpctl whatif JOB [--strategy S] [--bucket-mb B] [--world-size N] [--transport T]
// [--shard-optimizer] [--grad-accum K] [--link-from COMM_JOB] [--json]: a finished job's step
// replayed under another configuration (ddpd/common/step_replay.h, docs/whatif.md).
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include "commands.h"
#include "measured_job.h"
#include "whatif_report.h"

namespace ddpd::client {
namespace {

struct WhatIfFlags {
  std::string job_id;
  std::string from_file;
  WhatIfChange change;
  std::string link_from;
  bool json = false;
};

template <typename E>
void add_enum_change(CLI::App& command, std::optional<E>& target, const std::string& help) {
  command.add_option_function<std::string>(
      EnumInfo<E>::kFlag, [&target](const std::string& name) { target = parse_enum<E>(name); },
      help);
}

int whatif(Commands& commands, const WhatIfFlags& flags) {
  if (flags.job_id.empty() == flags.from_file.empty()) {
    throw OptionError("job", "give a job id or --from-file, one of them");
  }
  std::optional<ControlClient> control;
  auto connect = [&]() -> ControlClient& {
    if (!control) control.emplace(commands.connection());
    return *control;
  };
  const MeasuredJob job = flags.from_file.empty()
                              ? measured_job(connect().get(flags.job_id, false), "job")
                              : measured_job_from_file(flags.from_file, "--from-file");
  std::optional<LinkModel> given;
  if (!flags.link_from.empty()) {
    given = std::filesystem::exists(flags.link_from)
                ? comm_link_from_file(flags.link_from, "--link-from")
                : comm_job_link(connect().get(flags.link_from, false), "--link-from");
  }
  const StepFigures measured = measured_figures(job);
  const StepFigures predicted = predict(job, flags.change, given);
  const bool talks = predicted.world_size > 1;
  const LinkModel link = talks ? replay_link(job, flags.change, given) : LinkModel{};
  if (flags.json) {
    nlohmann::json out = {{"job_id", job.job_id},
                          {"measured", figures_json(measured)},
                          {"predicted", figures_json(predicted)},
                          {"limits", replay_limits()}};
    if (talks) out["link"] = link_json(link);
    std::cout << out.dump() << std::endl;
  } else {
    std::cout << whatif_table(measured, predicted, link);
  }
  return 0;
}

}  // namespace

void add_whatif_command(CLI::App& app, Commands& commands) {
  auto flags = std::make_shared<WhatIfFlags>();
  auto* command = app.add_subcommand(
      "whatif",
      "Predict a finished job's step under another strategy, bucket size, world size, "
      "transport, ZeRO-1 or accumulation, from its measured timeline (docs/whatif.md)");
  command->add_option("job", flags->job_id, "A succeeded DDP job");
  command->add_option(
      "--from-file", flags->from_file,
      "Or the job from `ddpctl show JOB --json` / `ddpctl local ddp --json` output");
  WhatIfChange& change = flags->change;
  add_enum_change(*command, change.strategy, "naive, flat, overlap or bucketed");
  command
      ->add_option_function<double>(
          "--bucket-mb", [&change](double mb) { change.bucket_size_mb = mb; }, "Bucket cap, MiB")
      ->check(CLI::PositiveNumber);
  command
      ->add_option_function<int>(
          "--world-size", [&change](int n) { change.world_size = n; }, "Ranks")
      ->check(CLI::PositiveNumber);
  add_enum_change(*command, change.transport, "gloo, shm or auto (the job's own)");
  command
      ->add_option_function<bool>(
          "--shard-optimizer", [&change](bool on) { change.shard_optimizer = on; },
          "ZeRO-1 on (true) or off (false)")
      ->expected(0, 1)
      ->default_str("true");
  command
      ->add_option_function<int64_t>(
          "--grad-accum", [&change](int64_t k) { change.grad_accum = k; }, "Micro-batches per step")
      ->check(CLI::PositiveNumber);
  command->add_option("--link-from", flags->link_from,
                      "A comm job (id, or a file from `ddpctl local comm --json` / `ddpd-worker "
                      "run comm --json`) whose all-reduce fit is the link: needed for another "
                      "transport");
  command->add_flag("--json", flags->json, "Measured, predicted, the link and the limits as JSON");
  commands.on(command, [&commands, flags] { return whatif(commands, *flags); });
}

}  // namespace ddpd::client
