// ddpctl: submit, list, watch, show, resume, diagnose, cancel, workers, plan, local and export;
// each command in client/src/commands/. This file parses and maps errors to exit codes: 0 success;
// 1 a failed RPC or job; 2 bad input (flags, a job file, or INVALID_ARGUMENT).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>

#include "commands/commands.h"
#include "control_client.h"
#include "ddpd/common/job_options.h"

int main(int argc, char** argv) {
  using namespace ddpd;
  CLI::App app{"ddpctl: submit and watch ddpd jobs"};
  app.require_subcommand(1);
  app.fallthrough();
  client::Commands commands(app);
  client::add_submit_command(app, commands);
  client::add_job_queries(app, commands);
  client::add_show_command(app, commands);
  client::add_resume_command(app, commands);
  client::add_diagnose_command(app, commands);
  client::add_plan_command(app, commands);
  client::add_local_command(app, commands);
  client::add_whatif_command(app, commands);
  client::add_tune_command(app, commands);
  client::add_export_command(app, commands);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const OptionError& e) {  // from a flag's own check (--sizes)
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  // The one environment variable ddpctl reads, here at the boundary.
  if (commands.connection().token.empty()) {
    if (const char* env = std::getenv("DDPD_TOKEN")) commands.connection().token = env;
  }
  try {
    return commands.run_parsed();
  } catch (const OptionError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const client::RpcError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
