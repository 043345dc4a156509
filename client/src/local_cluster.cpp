#include "local_cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <thread>

#include "ddpd/net.h"

extern char** environ;

namespace ddpd::client {
namespace {

std::string own_directory() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw std::runtime_error("cannot locate ddpctl (/proc/self/exe)");
  return std::filesystem::path(std::string(buf, n)).parent_path();
}

std::string random_token() {
  std::random_device rd;
  std::string token;
  const char* hex = "0123456789abcdef";
  for (int i = 0; i < 32; ++i) token += hex[rd() % 16];
  return token;
}

}  // namespace

LocalCluster::LocalCluster(const LocalClusterOptions& options) {
  std::string pattern = (std::filesystem::temp_directory_path() / "ddpctl-local-XXXXXX").string();
  if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
  directory_ = pattern;
  const int port = free_port("127.0.0.1");
  address_ = "127.0.0.1:" + std::to_string(port);
  token_ = random_token();
  const std::string bin = own_directory();
  for (const char* name : {"ddpd-coordinator", "ddpd-worker"}) {
    if (access((bin + "/" + name).c_str(), X_OK) != 0) {
      throw std::runtime_error(std::string("ddpctl local needs ") + name + " beside ddpctl in " +
                               bin);
    }
  }
  auto metrics_port = [&](int index) {
    return std::to_string(options.metrics_port > 0 ? options.metrics_port + index : 0);
  };
  spawn({bin + "/ddpd-coordinator", "--listen", address_, "--db", directory_ + "/ddpd.db",
         "--log-level", options.log_level, "--log-format", options.log_format, "--metrics-port",
         metrics_port(0)},
        "coordinator.log");
  // Waits for the coordinator to listen, so the workers' and ddpctl's first calls do not fail
  // into gRPC's reconnect backoff.
  if (!wait_for_port("127.0.0.1", port, std::chrono::seconds(30))) {
    keep_ = true;
    throw std::runtime_error("the coordinator did not start listening on " + address_ +
                             " within 30 s; log in " + directory_ + "/coordinator.log");
  }
  for (int i = 0; i < options.workers; ++i) {
    spawn(
        {bin + "/ddpd-worker", "--log-level", options.log_level, "--log-format", options.log_format,
         "serve", "--coordinator", address_, "--worker-id", "local-" + std::to_string(i),
         "--advertise-host", "127.0.0.1", "--metrics-port", metrics_port(1 + i)},
        "worker-" + std::to_string(i) + ".log");
  }
}

LocalCluster::~LocalCluster() { stop(); }

pid_t LocalCluster::spawn(const std::vector<std::string>& argv, const std::string& log_name) {
  // The token goes through the environment, not the command line (visible in ps).
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    if (std::string(*e).rfind("DDPD_TOKEN=", 0) != 0) env_strings.emplace_back(*e);
  }
  env_strings.push_back("DDPD_TOKEN=" + token_);
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);
  const std::string log = directory_ + "/" + log_name;
  // fork + exec rather than posix_spawn, so that each daemon asks for SIGKILL when ddpctl dies
  // (PR_SET_PDEATHSIG): a ddpctl killed outright leaves no coordinator or worker behind. Only
  // async-signal-safe calls before exec; a failed exec comes back through a close-on-exec pipe.
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) throw std::runtime_error("cannot start " + argv[0]);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    // The parent may have died between fork and prctl: then no signal would ever come.
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(127);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0 && (fd == 1 || dup2(fd, 1) == 1) && dup2(1, 2) == 2) {
      if (fd != 1) close(fd);
      execve(args[0], args.data(), envp.data());
    }
    const int error = errno;
    ssize_t ignored = write(report[1], &error, sizeof(error));
    (void)ignored;
    _exit(127);
  }
  close(report[1]);
  int error = 0;
  ssize_t n = -1;
  if (pid > 0) {
    do {
      n = read(report[0], &error, sizeof(error));
    } while (n < 0 && errno == EINTR);
  }
  close(report[0]);
  if (pid < 0) throw std::runtime_error("cannot start " + argv[0]);
  if (n > 0) {  // the child did not reach exec
    waitpid(pid, nullptr, 0);
    throw std::runtime_error("cannot start " + argv[0]);
  }
  children_.push_back(pid);
  return pid;
}

void LocalCluster::stop() {
  // Workers first, so none reports a lost coordinator, then the coordinator.
  for (auto it = children_.rbegin(); it != children_.rend(); ++it) kill(*it, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (pid_t pid : children_) {
    while (waitpid(pid, nullptr, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  children_.clear();
  if (!keep_ && !directory_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(directory_, ignored);
    directory_.clear();
  }
}

}  // namespace ddpd::client
