#include "ddpd/common/spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

extern char** environ;

namespace ddpd {
namespace {

// This process's environment with `overrides` applied, as NAME=VALUE strings.
std::vector<std::string> merged_environment(const std::map<std::string, std::string>& overrides) {
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e; ++e) {
    const std::string entry(*e);
    const auto eq = entry.find('=');
    if (eq != std::string::npos) merged[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  for (const auto& [name, value] : overrides) merged[name] = value;
  std::vector<std::string> out;
  for (const auto& [name, value] : merged) out.push_back(name + "=" + value);
  return out;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

pid_t spawn_child(const std::vector<std::string>& argv,
                  const std::map<std::string, std::string>& env, const std::string& out_path,
                  const std::string& err_path) {
  std::vector<std::string> env_strings = merged_environment(env);
  std::vector<std::string> argv_strings = argv;
  const std::vector<char*> envp = pointers(env_strings), args = pointers(argv_strings);
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0)
    throw std::runtime_error("cannot start " + argv[0] + ": pipe2");
  const pid_t parent = getpid();
  const char* out = out_path.c_str();
  const char* err = err_path.empty() ? nullptr : err_path.c_str();
  const pid_t pid = fork();
  if (pid == 0) {
    // The parent may have died between fork and prctl: then no signal would ever come.
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(127);
    auto redirect = [](const char* path, int target) {
      const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0) return false;
      if (fd == target) return true;
      const bool ok = dup2(fd, target) == target;
      close(fd);
      return ok;
    };
    if (redirect(out, 1) && (err ? redirect(err, 2) : dup2(1, 2) == 2)) {
      execve(args[0], args.data(), envp.data());
    }
    const int error = errno;
    ssize_t ignored = write(report[1], &error, sizeof(error));
    (void)ignored;
    _exit(127);
  }
  close(report[1]);
  if (pid < 0) {
    const int error = errno;
    close(report[0]);
    throw std::runtime_error("cannot start " + argv[0] + ": " + std::strerror(error));
  }
  int error = 0;
  ssize_t n;
  do {
    n = read(report[0], &error, sizeof(error));
  } while (n < 0 && errno == EINTR);
  close(report[0]);
  if (n > 0) {  // the child did not reach exec
    waitpid(pid, nullptr, 0);
    throw std::runtime_error("cannot start " + argv[0] + ": " + std::strerror(error));
  }
  return pid;
}

}  // namespace ddpd
