// ddpctl's commands, one file each: every add_*_command declares its subcommand's flags on `app`
// and registers what runs when that subcommand is the one given. main() parses, then runs it.
// Exit codes, for every command: 0 success; 1 a failed RPC or job; 2 bad input (a flag, a job
// file, or the coordinator's INVALID_ARGUMENT). Errors are thrown (OptionError naming the flag,
// client::RpcError, std::runtime_error) and mapped to those codes in main(), the one place.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

#include "control_client.h"
#include "ddpd/v1/ddpd.pb.h"

namespace ddpd::client {

// What the commands share: the connection flags, and the action of the command given.
// Thread contract: single-threaded (ddpctl's main thread).
class Commands {
 public:
  explicit Commands(CLI::App& app);

  ConnectionOptions& connection() { return connection_; }
  // `run` is what ddpctl does when `command` was parsed; it returns the exit code.
  void on(CLI::App* command, std::function<int()> run);
  // The action of the deepest parsed command (0 when none was registered for it).
  int run_parsed() const;

 private:
  ConnectionOptions connection_;
  std::vector<std::pair<CLI::App*, std::function<int()>>> actions_;
};

// Declares -f/--file on a job command; apply_job_file_if_given reads it once flags are parsed.
void add_job_file_flag(CLI::App& command, std::string& path);
// The file's keys, under the flags given on the command line (job_file.h); nothing without -f.
void apply_job_file_if_given(const std::string& path, CLI::App& command);

// Prints live lines until the job ends; returns its final state.
v1::JobState follow(ControlClient& control, const std::string& job_id);
// Exit code of a command that follows its job: 0 when it SUCCEEDED.
int follow_exit_code(ControlClient& control, const std::string& job_id);
// `show --trace` and `local --trace`: the Chrome trace file and the overlap table.
void write_trace(const v1::GetJobReply& reply, const std::string& path, std::ostream& report);

void add_submit_command(CLI::App& app, Commands& commands);    // submit ddp | comm
void add_resume_command(CLI::App& app, Commands& commands);    // resume JOB
void add_show_command(CLI::App& app, Commands& commands);      // show JOB
void add_diagnose_command(CLI::App& app, Commands& commands);  // diagnose JOB
void add_job_queries(CLI::App& app, Commands& commands);       // list, watch, cancel, workers
void add_plan_command(CLI::App& app, Commands& commands);      // plan [memory | bucket]
void add_local_command(CLI::App& app, Commands& commands);     // local ddp | comm
void add_whatif_command(CLI::App& app, Commands& commands);    // whatif JOB
void add_tune_command(CLI::App& app, Commands& commands);      // tune, local tune (after local)
void add_export_command(CLI::App& app, Commands& commands);    // export CHECKPOINT --hf DIR

class LocalCluster;
// `local` and `local tune`: until `workers` workers are IDLE (60 s; then throws, keeping logs).
void wait_for_workers(LocalCluster& cluster, ControlClient& control, int workers);

}  // namespace ddpd::client
