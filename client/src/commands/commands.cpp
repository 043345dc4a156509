#include "commands.h"

#include <fstream>
#include <iostream>

#include "ddpd/common/job_options.h"
#include "job_file.h"
#include "render.h"
#include "trace.h"

namespace ddpd::client {

Commands::Commands(CLI::App& app) {
  app.add_option("--coordinator", connection_.coordinator, "Coordinator host:port")
      ->capture_default_str();
  app.add_option("--token", connection_.token, "Shared token (default: $DDPD_TOKEN)");
  app.add_option("--tls-ca", connection_.tls_ca, "PEM CA certificate: connect with TLS");
  app.add_option("--wait", connection_.wait_seconds,
                 "Seconds to keep retrying while the coordinator is unavailable (restarting): "
                 "reads, submit and watch; cancel is tried once. 0: fail at once")
      ->capture_default_str();
}

void Commands::on(CLI::App* command, std::function<int()> run) {
  actions_.emplace_back(command, std::move(run));
}

int Commands::run_parsed() const {
  if (connection_.wait_seconds < 0) throw OptionError("--wait", "must be >= 0");
  // Registered parents come before their subcommands, so the last parsed one is the deepest.
  const std::function<int()>* chosen = nullptr;
  for (const auto& [command, run] : actions_) {
    if (command->parsed()) chosen = &run;
  }
  return chosen ? (*chosen)() : 0;
}

void add_job_file_flag(CLI::App& command, std::string& path) {
  command.add_option("-f,--file", path,
                     "Job file (YAML or JSON; keys are the flags without dashes)");
}

void apply_job_file_if_given(const std::string& path, CLI::App& command) {
  if (!path.empty()) apply_job_file(path, command);
}

v1::JobState follow(ControlClient& control, const std::string& job_id) {
  return control.watch(
      job_id, [](const v1::JobEvent& event) { std::cout << event_line(event) << std::endl; });
}

int follow_exit_code(ControlClient& control, const std::string& job_id) {
  return follow(control, job_id) == v1::SUCCEEDED ? 0 : 1;
}

void write_trace(const v1::GetJobReply& reply, const std::string& path, std::ostream& report) {
  const auto trace = chrome_trace(reply);
  std::ofstream out(path);
  if (!(out << trace.dump() << "\n"))
    throw std::runtime_error("--trace: cannot write '" + path + "'");
  report << "wrote " << path << " (" << trace["traceEvents"].size() << " events)\n"
         << overlap_table(overlap_by_rank(reply));
}

}  // namespace ddpd::client
