#include "support/process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "ddpd/common/remove_tree.h"
#include "ddpd/common/spawn.h"

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
  Running r;
  r.out_path = temp_dir() + "/" + tag + ".out";
  r.err_path = temp_dir() + "/" + tag + ".err";
  r.pid = spawn_child(argv, env, r.out_path, merge_stderr ? "" : r.err_path);
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
        outcomes[i].exited_unix_s = unix_now();
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
    // Each test process's files (checkpoints, tensors, logs: up to hundreds of MB) go when it
    // exits, or a full run fills the disk; DDPD_KEEP_TEST_DIRS=1 keeps them for a post-mortem.
    const char* keep = std::getenv("DDPD_KEEP_TEST_DIRS");
    if (!keep || std::string(keep) != "1") {
      static std::string to_remove;
      to_remove = pattern;
      // remove_tree, not std::filesystem::remove_all: under the CUDA wheel's libtorch.so on the
      // H100 machine this handler crashed every CUDA test process that had made the folder.
      std::atexit([] {
        std::error_code ignored;
        remove_tree(to_remove, ignored);
      });
    }
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

namespace {

bool bindable(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool bound = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return bound;
}

}  // namespace

int unused_port() {
  static std::mt19937 pick(std::random_device{}());
  int ephemeral_low = 32768;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> ephemeral_low;
  const int first = std::max(1024, ephemeral_low - 16384);
  if (first < ephemeral_low) {
    std::uniform_int_distribution<int> below(first, ephemeral_low - 1);
    for (int attempt = 0; attempt < 200; ++attempt) {
      const int port = below(pick);
      const bool workers_own =
          port >= kRendezvousPortFirst && port < kRendezvousPortFirst + kRendezvousPortCount;
      if (!workers_own && bindable(port)) return port;
    }
  }
  return free_port();  // no room below the range: the kernel's pick
}

namespace {

std::vector<ProcessOutcome> start_ranks_and_spares(
    const std::vector<std::string>& argv, int world_size, std::chrono::seconds timeout,
    const std::vector<std::pair<int, std::vector<std::string>>>& spares,
    const std::map<std::string, std::string>& extra_env) {
  static int counter = 0;
  const int port = unused_port();
  const int job = counter++;
  std::vector<Running> running;
  auto start_rank = [&](const std::vector<std::string>& command, int rank,
                        const std::string& name) {
    auto env = extra_env;
    env["MASTER_ADDR"] = "127.0.0.1";
    env["MASTER_PORT"] = std::to_string(port);
    env["RANK"] = std::to_string(rank);
    env["LOCAL_RANK"] = std::to_string(rank);
    env["WORLD_SIZE"] = std::to_string(world_size);
    running.push_back(start(command, env, "job" + std::to_string(job) + "-" + name));
  };
  for (int rank = 0; rank < world_size; ++rank) {
    start_rank(argv, rank, "rank" + std::to_string(rank));
  }
  for (size_t k = 0; k < spares.size(); ++k) {
    start_rank(spares[k].second, spares[k].first, "spare" + std::to_string(k));
  }
  return wait_all(running, timeout);
}

}  // namespace

std::vector<ProcessOutcome> run_ranks(const std::vector<std::string>& argv, int world_size,
                                      std::chrono::seconds timeout,
                                      const std::map<std::string, std::string>& extra_env) {
  return start_ranks_and_spares(argv, world_size, timeout, {}, extra_env);
}

std::vector<ProcessOutcome> run_ranks_with_spares(
    const std::vector<std::string>& argv, int world_size, std::chrono::seconds timeout,
    const std::vector<std::pair<int, std::vector<std::string>>>& spares) {
  return start_ranks_and_spares(argv, world_size, timeout, spares, {});
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

std::vector<int> child_pids(int pid, const std::string& name) {
  std::vector<int> children;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string child = entry.path().filename();
    if (child.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto paren = stat.rfind(')');  // "pid (comm) state ppid ..."
    if (paren == std::string::npos) continue;
    const auto open = stat.find('(');
    if (!name.empty() && stat.substr(open + 1, paren - open - 1) != name) continue;
    std::istringstream fields(stat.substr(paren + 2));
    char state;
    int ppid = 0;
    if (fields >> state >> ppid && ppid == pid && state != 'Z')
      children.push_back(std::stoi(child));
  }
  std::sort(children.begin(), children.end());
  return children;
}

}  // namespace ddpd::testing
