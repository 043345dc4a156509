// The daemon's side of one rank: `ddpd-worker serve` runs every assignment in a child process
// (`ddpd-worker rank`, rank_main.h), as torchelastic's agent runs its workers, so that it can
// always end a rank (a rank blocked in Gloo, in compute, or stopped) and a rank's crash, abort
// or out-of-memory kill is that rank's failure, never the daemon's.
//
// Protocol (rank_pipe.proto): the daemon writes one framed Assignment to the child's stdin and
// keeps stdin open while the rank should run, writing a framed Control there when the
// coordinator heals the job (a HealGroup for the rank's survivors). The child writes framed
// RankEvents to its fd 3 and a Result last, then exits. To stop a rank the daemon closes its stdin:
// the child sets its cancel flag and aborts its communicator (every collective wait ends within 0.1
// s), reports "cancelled" and exits; a child still alive stop_grace_seconds later is SIGKILLed. A
// child also gets SIGKILL when the daemon dies (PR_SET_PDEATHSIG; the child gets the daemon's pid
// and exits at once if its parent is already another, so a daemon that died before the child's
// prctl leaves no orphan), and the daemon kills a rank that stops talking (see
// progress_seconds below): a stopped rank frees its peers at once.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ddpd/v1/ddpd.pb.h"
#include "rank_pipe.pb.h"

namespace ddpd {

struct RankProcessOptions {
  std::string executable = "/proc/self/exe";  // a ddpd-worker: `rank` is its subcommand
  std::vector<std::string> flags;             // after `rank` (rank_main.h's flags, logging)
  // From stop() to SIGKILL. A rank sees the stop between steps, and its communicator's waits
  // end within 0.1 s of the abort (100 ms slices), so it normally exits within 0.3 s; a rank
  // stuck in compute or a stopped process is killed. Cancel must end a rank within 2 s.
  double stop_grace_seconds = 1.0;
  // The rank's own heartbeat: it writes Progress or Alive every progress_seconds from a thread
  // of its own, whatever its main thread is blocked in. After two intervals of silence the
  // daemon looks at the process: one stopped (SIGSTOP, state T) is killed and reported at once;
  // one silent for silence_seconds after it first spoke (wedged, swapping) is killed too.
  double progress_seconds = 1.0;
  double silence_seconds = 10.0;
};

// A `ddpd-worker rank` process started ahead of its assignment: it has loaded its libraries
// (LibTorch) and waits on stdin for the Assignment it reads first. A RankProcess that takes it
// skips the process's start, which a spare taking a lost rank's place waited for on the heal's
// path (0.15 s of it on the 2-core development host). Destroying one that was not taken kills
// its process (SIGKILL, reaped); it also dies with the daemon (PR_SET_PDEATHSIG).
// Thread contract: one thread at a time (the daemon keeps it under a mutex).
class StartedRankProcess {
 public:
  // Starts the process. Throws std::runtime_error when it cannot.
  explicit StartedRankProcess(const RankProcessOptions& options);
  ~StartedRankProcess();
  StartedRankProcess(const StartedRankProcess&) = delete;
  StartedRankProcess& operator=(const StartedRankProcess&) = delete;

  pid_t pid() const { return pid_; }
  // False once the process has ended (killed while it waited, say); it is reaped then.
  bool waiting();

 private:
  friend class RankProcess;
  pid_t pid_ = -1;
  int stdin_fd_ = -1;  // the daemon's ends of the child's stdin and of its event pipe (fd 3)
  int event_fd_ = -1;
};

// Thread contract: the constructor and run() on one thread (the daemon's job thread); stop()
// from any thread (the session thread on a cancel), before, during or after run(). run() owns
// the one timer thread that stop() and the end of the event stream arm.
class RankProcess {
 public:
  // Sends the assignment to `started`, or, where that is null or no longer waiting, to a child
  // it starts with `options`. Throws std::runtime_error when it cannot start one.
  RankProcess(RankProcessOptions options, const v1::Assignment& assignment,
              std::unique_ptr<StartedRankProcess> started = nullptr);
  ~RankProcess();  // stops and reaps a child that run() has not
  RankProcess(const RankProcess&) = delete;
  RankProcess& operator=(const RankProcess&) = delete;

  // Calls on_event for each event but the result, until the child's pipe closes; then reaps
  // the child (killing it after stop_grace_seconds if it lingers). Returns the child's result,
  // or one built from how it ended: cancelled after stop(), else PROCESS_KILLED (the signal)
  // or PROCESS_EXITED (the status), or PROCESS_STOPPED (stopped or silent, and killed), with
  // the last step it reported.
  v1::JobResult run(const std::function<void(const rank_pipe::RankEvent&)>& on_event);

  // Asks the rank to stop (closes its stdin) and arms the SIGKILL. Idempotent.
  void stop();

  // Writes `control` to the rank's stdin; false once stop() closed it or the rank is gone. A
  // HealGroup that shrinks the group renumbers the rank in the results built here.
  bool send(const rank_pipe::Control& control);

  pid_t pid() const { return pid_; }

 private:
  void arm_kill();
  bool wait_for_event();  // false when the rank is stopped or silent (then it is killed)
  int wait_for_exit();    // the wait status; kills after the grace once armed
  v1::JobResult outcome_without_result(int status) const;

  RankProcessOptions options_;
  v1::Assignment assignment_;
  pid_t pid_ = -1;
  int event_fd_ = -1;

  mutable std::mutex mutex_;  // guards everything below
  std::condition_variable exited_cv_;
  int stdin_fd_ = -1;
  bool stop_requested_ = false;
  bool kill_armed_ = false;
  bool exited_ = false;  // set before the child is reaped: no kill() can reach a reused pid
  bool killed_ = false;
  bool spoke_ = false;  // the rank wrote an event (its silence counts from then on)
  int64_t last_step_ = -1;
  // The rank's number and its group's size: the assignment's, until a shrinking HealGroup
  // renumbers it (send()).
  int rank_ = -1;
  int world_size_ = 0;
  std::string unresponsive_;  // why the rank was killed for silence; empty: it was not
  std::thread killer_;
};

// "SIGKILL (the out-of-memory killer, or kill -9)": the signal's name and its usual cause.
std::string describe_signal(int signal_number);

}  // namespace ddpd
