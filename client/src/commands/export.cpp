// ddpctl export CHECKPOINT --hf DIR: a ddpd checkpoint (any strategy, any world size) as a
// Hugging Face model directory, offline (docs/models.md). Reading a checkpoint's tensors needs
// LibTorch, which ddpctl does not link, so ddpctl hands the command to `ddpd-worker export`
// beside it: the flags are declared once (add_export_flags) and checked here first.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "commands.h"
#include "ddpd/common/ddp_flags.h"
#include "local_cluster.h"

namespace ddpd::client {
namespace {

int export_checkpoint(const ExportOptions& options) {
  const std::string worker = own_directory() + "/ddpd-worker";
  std::vector<std::string> argv = {worker,
                                   "export",
                                   options.checkpoint,
                                   "--hf",
                                   options.hf_dir,
                                   "--max-shard-size",
                                   std::to_string(options.max_shard_bytes)};
  if (options.force) argv.push_back("--force");
  std::vector<char*> args;
  for (auto& arg : argv) args.push_back(arg.data());
  args.push_back(nullptr);
  execv(worker.c_str(), args.data());
  throw std::runtime_error("ddpctl export needs ddpd-worker beside ddpctl: cannot run " + worker +
                           ": " + std::strerror(errno));
}

}  // namespace

void add_export_command(CLI::App& app, Commands& commands) {
  auto options = std::make_shared<ExportOptions>();
  auto* command = app.add_subcommand(
      "export", "Write a ddpd checkpoint as a Hugging Face model directory (docs/models.md)");
  add_export_flags(*command, *options);
  commands.on(command, [options] { return export_checkpoint(*options); });
}

}  // namespace ddpd::client
