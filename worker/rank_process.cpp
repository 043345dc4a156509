#include "rank_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <stdexcept>

#include "ddpd/api/restart_policy.h"
#include "frame_pipe.h"

extern char** environ;

namespace ddpd {
namespace {

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// The state letter of /proc/PID/stat ('T': stopped by a signal); '?' when unreadable.
char process_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto paren = stat.rfind(')');  // the command name may hold spaces and parentheses
  return paren != std::string::npos && paren + 2 < stat.size() ? stat[paren + 2] : '?';
}

}  // namespace

std::string describe_signal(int signal_number) {
  switch (signal_number) {
    case SIGKILL:
      return "SIGKILL (the out-of-memory killer, or kill -9)";
    case SIGABRT:
      return "SIGABRT (it aborted: a failed check in a library, or an uncaught exception)";
    case SIGSEGV:
      return "SIGSEGV (an invalid memory access)";
    case SIGBUS:
      return "SIGBUS (a bad memory access: e.g. a full /dev/shm)";
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    default:
      return "signal " + std::to_string(signal_number) + " (" + strsignal(signal_number) + ")";
  }
}

StartedRankProcess::StartedRankProcess(const RankProcessOptions& options) {
  int to_child[2], from_child[2];
  if (pipe2(to_child, O_CLOEXEC) != 0)
    throw std::runtime_error("pipe: " + std::string(strerror(errno)));
  if (pipe2(from_child, O_CLOEXEC) != 0) {
    ::close(to_child[0]);
    ::close(to_child[1]);
    throw std::runtime_error("pipe: " + std::string(strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, to_child[0], 0);  // dup2 clears O_CLOEXEC
  posix_spawn_file_actions_adddup2(&actions, from_child[1], 3);
  std::vector<std::string> args{options.executable,   "rank",
                                "--progress-seconds", std::to_string(options.progress_seconds),
                                "--daemon-pid",       std::to_string(getpid())};
  args.insert(args.end(), options.flags.begin(), options.flags.end());
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const int rc =
      posix_spawn(&pid_, options.executable.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(to_child[0]);
  ::close(from_child[1]);
  stdin_fd_ = to_child[1];
  event_fd_ = from_child[0];
  if (rc != 0) {
    pid_ = -1;
    close_fd(stdin_fd_);
    close_fd(event_fd_);
    throw std::runtime_error("cannot start the rank process " + options.executable + ": " +
                             strerror(rc));
  }
}

StartedRankProcess::~StartedRankProcess() {
  close_fd(stdin_fd_);
  close_fd(event_fd_);
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);  // not yet reaped: pid_ is still our child
  while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
}

bool StartedRankProcess::waiting() {
  if (pid_ <= 0) return false;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == 0) return true;
  pid_ = -1;  // reaped (or not ours to wait for): nothing left to kill
  return false;
}

RankProcess::RankProcess(RankProcessOptions options, const v1::Assignment& assignment,
                         std::unique_ptr<StartedRankProcess> started)
    : options_(std::move(options)),
      assignment_(assignment),
      rank_(assignment.rank()),
      world_size_(assignment.world_size()) {
  if (!started || !started->waiting()) started = std::make_unique<StartedRankProcess>(options_);
  std::swap(pid_, started->pid_);  // now ours to reap: its destructor kills nothing
  std::swap(stdin_fd_, started->stdin_fd_);
  std::swap(event_fd_, started->event_fd_);
  // A rank that dies before reading its assignment reports through run() (no result: exited).
  if (!write_frame(stdin_fd_, assignment_)) close_fd(stdin_fd_);
}

RankProcess::~RankProcess() {
  if (pid_ > 0 && !exited_) {
    stop();
    wait_for_exit();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    exited_ = true;
  }
  exited_cv_.notify_all();
  if (killer_.joinable()) killer_.join();
  close_fd(event_fd_);
  std::lock_guard<std::mutex> lock(mutex_);
  close_fd(stdin_fd_);
}

void RankProcess::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_requested_ = true;
    close_fd(stdin_fd_);  // the rank's stdin reaches end of file: its signal to stop
  }
  arm_kill();
}

bool RankProcess::send(const rank_pipe::Control& control) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!(stdin_fd_ >= 0 && write_frame(stdin_fd_, control))) return false;
  if (control.has_heal()) {  // the rank goes on under the number the HealGroup gives it
    rank_ = rank_after_heal(control.heal(), world_size_, rank_);
    if (control.heal().world_size() > 0) world_size_ = control.heal().world_size();
  }
  return true;
}

void RankProcess::arm_kill() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (kill_armed_ || exited_) return;
  kill_armed_ = true;
  killer_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mutex_);
    const auto grace = std::chrono::duration<double>(options_.stop_grace_seconds);
    if (exited_cv_.wait_for(lock, grace, [&] { return exited_; })) return;
    ::kill(pid_, SIGKILL);  // exited_ is false under the lock: pid_ is still our child
    killed_ = true;
  });
}

int RankProcess::wait_for_exit() {
  // Wait without reaping, mark exited under the lock, then reap: the killer never signals a
  // pid that the kernel may have reused.
  siginfo_t info{};
  while (waitid(P_PID, pid_, &info, WEXITED | WNOWAIT) != 0 && errno == EINTR) {
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    exited_ = true;
  }
  exited_cv_.notify_all();
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

v1::JobResult RankProcess::run(const std::function<void(const rank_pipe::RankEvent&)>& on_event) {
  std::optional<v1::JobResult> result;
  rank_pipe::RankEvent event;
  while (wait_for_event() && read_frame(event_fd_, event)) {
    if (event.has_result()) {
      result = event.result();
      continue;
    }
    if (event.has_step()) last_step_ = event.step().step();
    on_event(event);
  }
  arm_kill();  // the pipe closed: the child is exiting, or stuck in its exit
  const int status = wait_for_exit();
  if (killer_.joinable()) killer_.join();
  if (result) return *result;
  return outcome_without_result(status);
}

bool RankProcess::wait_for_event() {
  const double check_s = 2 * options_.progress_seconds + 0.5;
  double silent_s = 0;
  while (true) {
    pollfd readable{event_fd_, POLLIN, 0};
    const int rc = poll(&readable, 1, static_cast<int>(check_s * 1000));
    if (rc > 0) {
      spoke_ = true;
      return true;
    }
    if (rc < 0 && errno == EINTR) continue;
    silent_s += check_s;
    std::string why;
    char seconds[32];
    std::snprintf(seconds, sizeof(seconds), "%.1f", silent_s);
    if (process_state(pid_) == 'T') {
      why = "its process was stopped (SIGSTOP or another stop signal) and said nothing for " +
            std::string(seconds) + " s; the daemon killed it";
    } else if (spoke_ && silent_s >= options_.silence_seconds) {
      why = "its process said nothing for " + std::string(seconds) +
            " s (wedged, or starved of CPU or memory); the daemon killed it";
    } else {
      continue;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    unresponsive_ = why;
    if (!exited_) ::kill(pid_, SIGKILL);
    return false;
  }
}

v1::JobResult RankProcess::outcome_without_result(int status) const {
  v1::JobResult r;
  std::lock_guard<std::mutex> lock(mutex_);
  r.set_job_id(assignment_.job_id());
  r.set_rank(rank_);
  r.set_attempt(assignment_.attempt());
  r.set_succeeded(false);
  r.set_named_rank(rank_);
  const std::string at_step =
      last_step_ >= 0 ? " (the last step it reported: " + std::to_string(last_step_) + ")"
                      : " (before it reported a step)";
  if (!unresponsive_.empty()) {
    r.set_cause(v1::RANK_FAILURE_PROCESS_STOPPED);
    r.set_error(unresponsive_ + at_step);
  } else if (stop_requested_) {
    r.set_cause(v1::RANK_FAILURE_CANCELLED);
    char grace[32];
    std::snprintf(grace, sizeof(grace), "%.1f", options_.stop_grace_seconds);
    r.set_error(killed_ ? "job cancelled: the rank process did not stop within " +
                              std::string(grace) + " s and was killed"
                        : "job cancelled");
  } else if (WIFSIGNALED(status)) {
    r.set_cause(v1::RANK_FAILURE_PROCESS_KILLED);
    r.set_error("its process was killed by " + describe_signal(WTERMSIG(status)) + at_step);
  } else {
    r.set_cause(v1::RANK_FAILURE_PROCESS_EXITED);
    r.set_error("its process exited with status " + std::to_string(WEXITSTATUS(status)) +
                " without a result" + at_step);
  }
  return r;
}

}  // namespace ddpd
