// ddpctl submit ddp | comm: a job from flags (and -f FILE), validated here, then submitted.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>

#include "commands.h"
#include "ddpd/api/spec_convert.h"
#include "ddpd/common/checkpoint_facts.h"
#include "ddpd/common/ddp_flags.h"
#include "ddpd/common/memory_estimate.h"
#include "job_file.h"
#include "job_specs.h"

namespace ddpd::client {
namespace {

struct SubmitFlags {
  DdpJobOptions ddp;
  CommJob comm;
  int world_size = 1;
  bool watch = false;
  std::string job_file;
};

bool offers_backend(const v1::WorkerHello& hello, const std::string& backend) {
  if (hello.backends().empty()) return backend == "gloo";  // an older worker: gloo only
  return std::find(hello.backends().begin(), hello.backends().end(), backend) !=
         hello.backends().end();
}

// Warns (stderr; the job is queued all the same) when fewer registered workers than the job's
// ranks offer its backend and the memory one rank needs: the coordinator lets jobs behind it
// start first (backfill), and this one waits for workers to register.
void warn_if_no_workers_can_hold(ControlClient& control, const v1::JobSpec& spec,
                                 const std::string& job_id) {
  const bool ddp = spec.has_ddp();
  const DdpJobOptions options = ddp ? ddp_options_of(spec) : DdpJobOptions{};
  const bool cuda = ddp && options.device == Device::kCuda;
  const std::string backend =
      cuda ? "nccl" : (!ddp && spec.comm().backend() == "nccl" ? "nccl" : "gloo");
  const int64_t needs = ddp ? estimate_rank_memory(options, spec.world_size()).total() : 0;
  int registered = 0, qualify = 0;
  const v1::ListWorkersReply workers = control.workers();
  for (const auto& worker : workers.workers()) {
    if (worker.state() != v1::IDLE && worker.state() != v1::BUSY) continue;
    ++registered;
    const int64_t memory = cuda ? worker.hello().gpu_memory_bytes() : worker.hello().memory_bytes();
    qualify += offers_backend(worker.hello(), backend) && (memory == 0 || memory >= needs);
  }
  if (qualify >= spec.world_size()) return;
  char memory[64] = "";
  if (needs > 0) std::snprintf(memory, sizeof(memory), " and %.2f GB of memory", needs / 1e9);
  std::cerr << "warning: " << job_id << " needs " << spec.world_size() << " workers offering "
            << backend << memory << ", but " << qualify << " of the " << registered
            << " registered workers do: it waits until more register, and later jobs that fit "
               "start first (lower --world-size, or start more workers)\n";
}

int submit_spec(Commands& commands, const v1::JobSpec& spec, bool watch) {
  validate_spec(spec);  // the coordinator checks again; fail fast here
  if (spec.has_ddp() && !spec.ddp().resume().empty()) {
    // The checkpoint, where this host can read it: a resume that trains no step is refused.
    const DdpJobOptions options = ddp_options_of(spec);
    if (const auto facts = read_checkpoint_facts(options.resume, options.checkpoint_dir)) {
      check_resume(options, *facts);
    }
  }
  ControlClient control(commands.connection());
  const v1::Job submitted = control.submit(spec);
  std::cout << submitted.job_id() << std::endl;
  warn_if_no_workers_can_hold(control, spec, submitted.job_id());
  return watch ? follow_exit_code(control, submitted.job_id()) : 0;
}

}  // namespace

void add_submit_command(CLI::App& app, Commands& commands) {
  auto flags = std::make_shared<SubmitFlags>();
  auto* submit = app.add_subcommand("submit", "Submit a job");
  submit->require_subcommand(1);
  auto* ddp = submit->add_subcommand("ddp", "DDP training of the Transformer LM");
  add_ddp_flags(*ddp, flags->ddp);
  auto* comm = submit->add_subcommand("comm", "Collective benchmark");
  add_comm_job_flags(*comm, flags->comm);
  for (CLI::App* command : {ddp, comm}) {
    command->add_option("--world-size", flags->world_size, "Ranks (one worker each)")
        ->capture_default_str();
    command->add_flag("--watch", flags->watch, "Follow the job until it ends");
    add_job_file_flag(*command, flags->job_file);
  }
  commands.on(ddp, [&commands, flags, ddp] {
    apply_job_file_if_given(flags->job_file, *ddp);
    make_paths_absolute(flags->ddp);  // the daemons read them elsewhere: one meaning for each
    fit_default_batch(flags->ddp, *ddp, flags->world_size);
    return submit_spec(commands, ddp_spec(flags->ddp, flags->world_size), flags->watch);
  });
  commands.on(comm, [&commands, flags, comm] {
    apply_job_file_if_given(flags->job_file, *comm);
    return submit_spec(commands, comm_spec(flags->comm, flags->world_size), flags->watch);
  });
}

}  // namespace ddpd::client
