// One coordinator per store. Two coordinators on one --db each believe they own its jobs: the
// second marks the first's running job FAILED "coordinator restarted" while the first goes on
// running it, and both hand out the same next job id. So the coordinator holds an exclusive
// flock(2) on a lock file beside the store (DB.lock) for its whole life; the kernel drops it when
// the process ends, however it ends, so a crashed coordinator never leaves a stale lock.
#pragma once

#include <string>

namespace ddpd::coordinator {

// Thread contract: constructed once by main() before the store opens; no methods.
class StoreLock {
 public:
  // Takes the lock on `db_path` + ".lock" and writes this process's pid into it. Throws
  // std::runtime_error naming the flag, the store and the holder's pid when another process
  // holds it, or naming the file when it cannot be opened.
  explicit StoreLock(const std::string& db_path);
  ~StoreLock();
  StoreLock(const StoreLock&) = delete;
  StoreLock& operator=(const StoreLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace ddpd::coordinator
