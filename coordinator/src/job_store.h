// Durable job store on SQLite (WAL): jobs, their state history, incidents and per-rank step
// reports.
#pragma once

#include <sqlite3.h>

#include <chrono>
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
  // Step reports are written in batches (one transaction and one prepared statement per batch):
  // at kStepBatch rows, when flush_steps_older_than() finds the oldest waiting longer than its
  // argument (the coordinator's reaper calls it twice a second), before load_steps(), and on
  // destruction. One transaction per report cost a WAL frame per row and held the coordinator
  // at one core near 10,000 reports/s (docs/scale.md). A crash loses at most the unflushed
  // batch; jobs, transitions and incidents are written at once.
  void add_step(const std::string& job_id, const v1::StepReport& step);
  void flush_steps();
  void flush_steps_older_than(std::chrono::milliseconds age);
  // Whether every step report added so far is committed (what an acknowledgement may cover).
  bool steps_committed() const { return pending_steps_.empty(); }
  static constexpr size_t kStepBatch = 512;
  void add_incident(const std::string& job_id, const v1::Incident& incident);
  // Replaces the job's rank statuses (what ddpctl diagnose shows once it has ended).
  void save_ranks(const v1::Job& job);

  // Every job in submission order, with its history and incidents; `sequences` gets each one's
  // sequence number.
  std::vector<v1::Job> load_jobs(std::vector<int64_t>& sequences);
  // SubmitJob's request ids (SubmitJobRequest.request_id): the job each one created.
  void save_submission(const std::string& request_id, const std::string& job_id);
  std::string submission(const std::string& request_id);  // empty: none
  std::vector<v1::StepReport> load_steps(const std::string& job_id);
  int64_t max_sequence();

 private:
  void exec(const std::string& sql);
  bool has_column(const std::string& table, const std::string& column);
  sqlite3* db_ = nullptr;
  struct PendingStep {
    std::string job_id;
    v1::StepReport report;
  };
  std::vector<PendingStep> pending_steps_;
  std::chrono::steady_clock::time_point oldest_pending_step_;
};

}  // namespace ddpd::coordinator
