// A job's file or directory that cannot be opened where the job runs. The worker that meets it
// adds who it is and where (worker/rank_main.cpp): a path ddpctl checked on the user's host may be
// missing on a worker's.
#pragma once

#include <string>
#include <utility>

#include "ddpd/common/job_options.h"

namespace ddpd {

// what() is "<flag>: <reason>", as OptionError's; path() is the path that could not be opened.
class UnreadablePath : public OptionError {
 public:
  UnreadablePath(std::string flag, std::string path, const std::string& reason)
      : OptionError(std::move(flag), reason), path_(std::move(path)) {}
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace ddpd
