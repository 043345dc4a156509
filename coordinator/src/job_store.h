// Durable job store on SQLite (WAL): jobs, their state history, incidents and per-rank step
// reports.
#pragma once

#include <sqlite3.h>

#include <string>
#include <vector>

#include "ddpd/v1/ddpd.pb.h"

namespace ddpd::coordinator {

// Thread contract: not thread-safe; the coordinator calls it under its own mutex.
// Errors throw std::runtime_error with SQLite's message.
class JobStore {
 public:
  explicit JobStore(const std::string& path);
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  // Inserts or updates the job row (spec, state, workers, result); history goes through
  // add_transition.
  void save_job(const v1::Job& job, int64_t sequence);
  void add_transition(const std::string& job_id, const v1::StateTransition& transition);
  void add_step(const std::string& job_id, const v1::StepReport& step);
  void add_incident(const std::string& job_id, const v1::Incident& incident);
  // Replaces the job's rank statuses (what ddpctl diagnose shows once it has ended).
  void save_ranks(const v1::Job& job);

  // Every job in submission order, with its history and incidents.
  std::vector<v1::Job> load_jobs();
  std::vector<v1::StepReport> load_steps(const std::string& job_id);
  int64_t max_sequence();

 private:
  void exec(const std::string& sql);
  sqlite3* db_ = nullptr;
};

}  // namespace ddpd::coordinator
