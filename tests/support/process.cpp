#include "support/process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace ddpd::testing {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

struct Running {
  pid_t pid = -1;
  std::string out_path, err_path;
};

Running start(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
              const std::string& tag, bool merge_stderr = false) {
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e; ++e) {
    std::string entry(*e);
    auto eq = entry.find('=');
    if (eq != std::string::npos) merged[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  for (const auto& [k, v] : env) merged[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : merged) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);

  Running r;
  r.out_path = temp_dir() + "/" + tag + ".out";
  r.err_path = temp_dir() + "/" + tag + ".err";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, r.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  if (merge_stderr) {
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
  } else {
    posix_spawn_file_actions_addopen(&actions, 2, r.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
  }
  const int rc = posix_spawn(&r.pid, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0)
    throw std::runtime_error("posix_spawn " + argv[0] + " failed: " + std::to_string(rc));
  return r;
}

std::vector<ProcessOutcome> wait_all(std::vector<Running>& running, std::chrono::seconds timeout) {
  std::vector<ProcessOutcome> outcomes(running.size());
  std::vector<bool> done(running.size(), false);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  size_t remaining = running.size();
  while (remaining > 0) {
    for (size_t i = 0; i < running.size(); ++i) {
      if (done[i]) continue;
      int status = 0;
      if (waitpid(running[i].pid, &status, WNOHANG) == running[i].pid) {
        outcomes[i].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        done[i] = true;
        --remaining;
      }
    }
    if (remaining == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (size_t i = 0; i < running.size(); ++i) {
        if (done[i]) continue;
        kill(running[i].pid, SIGKILL);
        waitpid(running[i].pid, nullptr, 0);
        outcomes[i].timed_out = true;
        outcomes[i].exit_code = -1;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (size_t i = 0; i < running.size(); ++i) {
    outcomes[i].out = slurp(running[i].out_path);
    outcomes[i].err = slurp(running[i].err_path);
  }
  return outcomes;
}

}  // namespace

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    throw std::runtime_error("free_port: bind failed");
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

std::string binary_dir() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw std::runtime_error("readlink /proc/self/exe failed");
  std::string path(buf, n);
  return path.substr(0, path.rfind('/'));
}

std::string temp_dir() {
  static const std::string dir = [] {
    std::string pattern = "/tmp/ddpd-test-XXXXXX";
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    return pattern;
  }();
  return dir;
}

ProcessOutcome run_process(const std::vector<std::string>& argv,
                           const std::map<std::string, std::string>& env,
                           std::chrono::seconds timeout) {
  static int counter = 0;
  std::vector<Running> running{start(argv, env, "proc" + std::to_string(counter++))};
  return wait_all(running, timeout).front();
}

std::vector<ProcessOutcome> run_ranks(const std::vector<std::string>& argv, int world_size,
                                      std::chrono::seconds timeout,
                                      const std::map<std::string, std::string>& extra_env) {
  static int counter = 0;
  const int port = free_port();
  const int job = counter++;
  std::vector<Running> running;
  for (int rank = 0; rank < world_size; ++rank) {
    auto env = extra_env;
    env["MASTER_ADDR"] = "127.0.0.1";
    env["MASTER_PORT"] = std::to_string(port);
    env["RANK"] = std::to_string(rank);
    env["LOCAL_RANK"] = std::to_string(rank);
    env["WORLD_SIZE"] = std::to_string(world_size);
    running.push_back(
        start(argv, env, "job" + std::to_string(job) + "-rank" + std::to_string(rank)));
  }
  return wait_all(running, timeout);
}

BackgroundProcess::BackgroundProcess(const std::vector<std::string>& argv,
                                     const std::map<std::string, std::string>& env,
                                     const std::string& log_name) {
  Running r = start(argv, env, log_name, /*merge_stderr=*/true);
  pid_ = r.pid;
  log_path_ = r.out_path;
}

BackgroundProcess::~BackgroundProcess() {
  if (pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

void BackgroundProcess::signal(int sig) {
  if (pid_ > 0) kill(pid_, sig);
}

int BackgroundProcess::wait(std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

std::string BackgroundProcess::log() const { return slurp(log_path_); }

}  // namespace ddpd::testing
