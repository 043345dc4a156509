// Command-line flags of a DDP job, declared once for every front end (ddpd-worker run ddp,
// and later ddpctl submit ddp / ddpctl local).
#pragma once

#include <CLI/CLI.hpp>

#include "ddpd/common/comm_options.h"
#include "ddpd/common/job_option_table.h"

namespace ddpd {

void add_ddp_flags(CLI::App& app, DdpJobOptions& options);

// An offline export of a ddpd checkpoint as a Hugging Face model directory (ddpd-worker export,
// ddpctl export; docs/models.md).
struct ExportOptions {
  std::string checkpoint;  // DIR/step-N, or a checkpoint directory holding `latest`
  std::string hf_dir;      // --hf
  int64_t max_shard_bytes = kDefaultMaxShardBytes;
  bool force = false;  // --force: write into a non-empty --hf directory
};
void add_export_flags(CLI::App& app, ExportOptions& options);
// Comm-benchmark flags; --sizes is parsed into options.sizes_bytes (OptionError on bad sizes).
void add_comm_flags(CLI::App& app, CommBenchOptions& options);
// A comm job's flags: add_comm_flags plus --backend, --transport and --timeout (ddpctl submit
// comm, ddpctl local comm, ddpd-worker run comm).
void add_comm_job_flags(CLI::App& app, CommJob& job);

}  // namespace ddpd
