// ddpctl show JOB: the summary, or --json, --csv, --spec (a job file that resubmits it), --plot
// or --trace.
#include <iostream>
#include <memory>

#include "commands.h"
#include "ddpd/common/result_json.h"
#include "job_file.h"
#include "plot.h"
#include "render.h"

namespace ddpd::client {
namespace {

struct ShowFlags {
  std::string job_id;
  bool json = false;
  bool csv = false;
  bool spec = false;
  std::string plot_path;
  std::string trace_path;
};

void plot(const v1::Job& job, const std::string& path) {
  if (job.result_json().empty()) {
    throw std::runtime_error("--plot: job " + job.job_id() + " has no result to draw (" +
                             v1::JobState_Name(job.state()) + ")");
  }
  const auto result = nlohmann::json::parse(job.result_json());
  if (job.spec().has_comm()) {
    plot_comm({comm_result_from_json(result)}, path);
  } else {
    plot_ddp(training_result_from_json(result), job.job_id(), path);
  }
}

int show(Commands& commands, const ShowFlags& flags) {
  ControlClient control(commands.connection());
  const bool with_steps =
      flags.json || flags.csv || !flags.plot_path.empty() || !flags.trace_path.empty();
  const auto reply = control.get(flags.job_id, with_steps);
  if (flags.spec) {
    std::cout << job_file_yaml(reply.job().spec());
  } else if (!flags.trace_path.empty()) {
    write_trace(reply, flags.trace_path, std::cout);
  } else if (!flags.plot_path.empty()) {
    plot(reply.job(), flags.plot_path);
    std::cout << "wrote " << flags.plot_path << std::endl;
  } else if (flags.json) {
    std::cout << job_json(reply).dump() << std::endl;
  } else if (flags.csv) {
    std::cout << steps_csv(reply);
  } else {
    std::cout << job_summary(reply);
  }
  return 0;
}

}  // namespace

void add_show_command(CLI::App& app, Commands& commands) {
  auto flags = std::make_shared<ShowFlags>();
  auto* command = app.add_subcommand("show", "Show a job's summary and results");
  command->add_option("job", flags->job_id, "Job id")->required();
  command->add_flag("--json", flags->json, "The run --json envelope plus job_id and history");
  command->add_flag("--csv", flags->csv, "Per-rank step rows");
  command->add_flag("--spec", flags->spec,
                    "The job's effective spec as a job file (YAML) that resubmits it: submit … -f");
  command->add_option("--plot", flags->plot_path,
                      "Draw a chart (.png or .svg): busbw by size for comm jobs, step time and "
                      "comm fraction for DDP jobs (needs gnuplot)");
  command->add_option("--trace", flags->trace_path,
                      "Write a per-rank timeline (Chrome trace JSON: open in ui.perfetto.dev or "
                      "chrome://tracing) and print how much communication overlapped backward");
  commands.on(command, [&commands, flags] { return show(commands, *flags); });
}

}  // namespace ddpd::client
