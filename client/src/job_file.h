// Job files: `ddpctl submit ddp -f job.yaml` (or .json, and `ddpctl local … -f`) takes every field
// the flags take, and `ddpctl show JOB --spec` prints a job's effective spec as one.
//
// Format (YAML; JSON is YAML): keys are the long flag names without dashes, with '_' accepted
// for '-' (`bucket-mb: 25`, `shard-optimizer: true`, `sizes: [1MB, 16MB]`), plus optional
// `kind: ddp | comm` (checked against the subcommand). docs/job-files.md.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "ddpd/api/spec_convert.h"
#include "ddpd/common/job_options.h"
#include "ddpd/v1/ddpd.pb.h"

namespace ddpd::client {

// Path options (the table's `as_path()`: --data, --data-text, --eval-data, --init-from,
// --export-hf, --checkpoint-dir, --resume) hold one meaning everywhere: ddpctl makes them absolute
// before it submits, since the coordinator and the workers run elsewhere, in other directories.
// A job file's relative paths are taken against the file's directory (as compose does), the
// command line's against the working directory. --resume's words latest and auto stay words.
bool is_path_flag(const std::string& flag);  // "--data"
void make_paths_absolute(DdpJobOptions& options);

// Applies the file's keys to the options of `command` (a parsed `ddp` or `comm` subcommand; keys
// not found there are looked up on its parent, e.g. `local`'s `workers`) that the command line
// did not give: flags override the file. Values go through the option's own conversion and
// checks; a path option's relative value is taken against the file's directory. Throws
// OptionError("-f", "FILE: key 'K': reason") for an unknown key, a wrong type or a
// `kind` that is not the subcommand's.
void apply_job_file(const std::string& path, CLI::App& command);

// The spec as a job file that resubmits it unchanged: `kind`, `world-size`, and every field the
// spec sets, under its flag's name.
std::string job_file_yaml(const v1::JobSpec& spec);

}  // namespace ddpd::client
