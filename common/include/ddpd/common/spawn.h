// Starting a child process that dies with its parent: ddpctl local's daemons, and the tests'
// daemons and ranks.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace ddpd {

// Starts argv (argv[0] a path) with this process's environment plus `env` (which wins), stdout
// to out_path and stderr to err_path (to stdout when empty), both truncated. Returns the pid;
// throws std::runtime_error "cannot start ARGV0: REASON" when the child cannot reach exec.
//
// fork + exec rather than posix_spawn, so that the child asks for SIGKILL when this process
// dies (PR_SET_PDEATHSIG): a ddpctl killed outright, or a test binary killed by CTest's timeout,
// runs no destructors, and its daemons must not outlive it. The signal follows the thread that
// forked, so spawn from the thread that waits for or owns the child. Between fork and exec the
// child makes only async-signal-safe calls; a failed exec comes back through a close-on-exec
// pipe.
pid_t spawn_child(const std::vector<std::string>& argv,
                  const std::map<std::string, std::string>& env, const std::string& out_path,
                  const std::string& err_path = "");

}  // namespace ddpd
