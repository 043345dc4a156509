#include "job_store.h"

#include "ddpd/api/spec_convert.h"

#include <stdexcept>

namespace ddpd::coordinator {
namespace {

class Statement {
 public:
  Statement(sqlite3* db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr) != SQLITE_OK) fail("prepare");
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement& text(int i, const std::string& v) {
    sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Statement& blob(int i, const std::string& v) {
    sqlite3_bind_blob(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Statement& integer(int i, int64_t v) {
    sqlite3_bind_int64(stmt_, i, v);
    return *this;
  }
  Statement& real(int i, double v) {
    sqlite3_bind_double(stmt_, i, v);
    return *this;
  }
  bool step() {
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE) fail("step");
    return false;
  }
  std::string column_text(int i) {
    const auto* p = sqlite3_column_blob(stmt_, i);
    return p ? std::string(static_cast<const char*>(p), sqlite3_column_bytes(stmt_, i)) : "";
  }
  int64_t column_int(int i) { return sqlite3_column_int64(stmt_, i); }
  double column_real(int i) { return sqlite3_column_double(stmt_, i); }

 private:
  [[noreturn]] void fail(const char* what) {
    throw std::runtime_error(std::string("sqlite ") + what + ": " + sqlite3_errmsg(db_));
  }
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
};

}  // namespace

JobStore::JobStore(const std::string& path) {
  if (sqlite3_open(path.c_str(), &db_) != SQLITE_OK) {
    std::string message = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    throw std::runtime_error("cannot open job database '" + path + "': " + message);
  }
  sqlite3_busy_timeout(db_, 5000);
  exec("PRAGMA journal_mode=WAL");
  exec("PRAGMA synchronous=NORMAL");
  exec(
      "CREATE TABLE IF NOT EXISTS jobs (job_id TEXT PRIMARY KEY, sequence INTEGER NOT NULL, "
      "kind TEXT NOT NULL, world_size INTEGER NOT NULL, spec BLOB NOT NULL, state TEXT NOT NULL, "
      "worker_ids TEXT NOT NULL, result_json TEXT NOT NULL, error TEXT NOT NULL)");
  exec(
      "CREATE TABLE IF NOT EXISTS transitions (job_id TEXT NOT NULL, state TEXT NOT NULL, "
      "state_code INTEGER NOT NULL, unix_time REAL NOT NULL, reason TEXT NOT NULL)");
  exec(
      "CREATE TABLE IF NOT EXISTS incidents (job_id TEXT NOT NULL, unix_time REAL NOT NULL, "
      "kind TEXT NOT NULL, rank INTEGER NOT NULL, message TEXT NOT NULL)");
  exec(
      "CREATE TABLE IF NOT EXISTS steps (job_id TEXT NOT NULL, rank INTEGER NOT NULL, "
      "step INTEGER NOT NULL, loss REAL, step_seconds REAL, comm_fraction REAL, report BLOB "
      "NOT NULL, PRIMARY KEY (job_id, rank, step))");
  // A store from before groups were kept (an upgrade): the column is added, empty.
  if (!has_column("jobs", "grp")) exec("ALTER TABLE jobs ADD COLUMN grp BLOB NOT NULL DEFAULT x''");
  exec(
      "CREATE TABLE IF NOT EXISTS submissions (request_id TEXT PRIMARY KEY, job_id TEXT NOT "
      "NULL)");
  exec(
      "CREATE TABLE IF NOT EXISTS ranks (job_id TEXT NOT NULL, rank INTEGER NOT NULL, status BLOB "
      "NOT NULL, PRIMARY KEY (job_id, rank))");
}

JobStore::~JobStore() {
  try {
    flush_steps();
  } catch (const std::exception&) {
  }  // closing regardless: what was flushed stays
  sqlite3_close(db_);
}

void JobStore::exec(const std::string& sql) {
  char* error = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
    std::string message = error ? error : "unknown error";
    sqlite3_free(error);
    throw std::runtime_error("sqlite: " + message + " in: " + sql);
  }
}

bool JobStore::has_column(const std::string& table, const std::string& column) {
  Statement info(db_, "SELECT name FROM pragma_table_info(?1)");
  info.text(1, table);
  while (info.step()) {
    if (info.column_text(0) == column) return true;
  }
  return false;
}

void JobStore::save_job(const v1::Job& job, int64_t sequence) {
  std::string workers;
  for (const auto& w : job.worker_ids()) workers += (workers.empty() ? "" : ",") + w;
  Statement(db_,
            "INSERT INTO jobs (job_id, sequence, kind, world_size, spec, state, worker_ids, "
            "result_json, error, grp) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) ON "
            "CONFLICT(job_id) DO UPDATE SET state=?6, worker_ids=?7, result_json=?8, error=?9, "
            "grp=?10")
      .text(1, job.job_id())
      .integer(2, sequence)
      .text(3, kind_name(job.spec()))
      .integer(4, job.spec().world_size())
      .blob(5, job.spec().SerializeAsString())
      .text(6, v1::JobState_Name(job.state()))
      .text(7, workers)
      .text(8, job.result_json())
      .text(9, job.error())
      .blob(10, job.group().SerializeAsString())
      .step();
}

void JobStore::save_submission(const std::string& request_id, const std::string& job_id) {
  Statement(db_, "INSERT OR IGNORE INTO submissions VALUES (?1, ?2)")
      .text(1, request_id)
      .text(2, job_id)
      .step();
}

std::string JobStore::submission(const std::string& request_id) {
  Statement select(db_, "SELECT job_id FROM submissions WHERE request_id = ?1");
  select.text(1, request_id);
  return select.step() ? select.column_text(0) : "";
}

void JobStore::add_transition(const std::string& job_id, const v1::StateTransition& t) {
  Statement(db_, "INSERT INTO transitions VALUES (?1, ?2, ?3, ?4, ?5)")
      .text(1, job_id)
      .text(2, v1::JobState_Name(t.state()))
      .integer(3, t.state())
      .real(4, t.unix_time())
      .text(5, t.reason())
      .step();
}

void JobStore::add_incident(const std::string& job_id, const v1::Incident& incident) {
  Statement(db_, "INSERT INTO incidents VALUES (?1, ?2, ?3, ?4, ?5)")
      .text(1, job_id)
      .real(2, incident.unix_time())
      .text(3, incident.kind())
      .integer(4, incident.rank())
      .text(5, incident.message())
      .step();
}

void JobStore::save_ranks(const v1::Job& job) {
  for (const auto& r : job.ranks()) {
    Statement(db_, "INSERT OR REPLACE INTO ranks VALUES (?1, ?2, ?3)")
        .text(1, job.job_id())
        .integer(2, r.rank())
        .blob(3, r.SerializeAsString())
        .step();
  }
}

void JobStore::add_step(const std::string& job_id, const v1::StepReport& s) {
  if (pending_steps_.empty()) oldest_pending_step_ = std::chrono::steady_clock::now();
  pending_steps_.push_back({job_id, s});
  if (pending_steps_.size() >= kStepBatch) flush_steps();
}

void JobStore::flush_steps_older_than(std::chrono::milliseconds age) {
  if (!pending_steps_.empty() && std::chrono::steady_clock::now() - oldest_pending_step_ >= age) {
    flush_steps();
  }
}

void JobStore::flush_steps() {
  if (pending_steps_.empty()) return;
  exec("BEGIN");
  try {
    sqlite3_stmt* insert = nullptr;
    if (sqlite3_prepare_v2(db_, "INSERT OR REPLACE INTO steps VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                           -1, &insert, nullptr) != SQLITE_OK) {
      throw std::runtime_error(std::string("sqlite prepare: ") + sqlite3_errmsg(db_));
    }
    std::string blob;
    for (const auto& [job_id, s] : pending_steps_) {
      s.SerializeToString(&blob);
      sqlite3_bind_text(insert, 1, job_id.data(), static_cast<int>(job_id.size()),
                        SQLITE_TRANSIENT);
      sqlite3_bind_int64(insert, 2, s.rank());
      sqlite3_bind_int64(insert, 3, s.step());
      sqlite3_bind_double(insert, 4, s.loss());
      sqlite3_bind_double(insert, 5, s.step_seconds());
      sqlite3_bind_double(insert, 6, s.comm_fraction());
      sqlite3_bind_blob(insert, 7, blob.data(), static_cast<int>(blob.size()), SQLITE_TRANSIENT);
      const int rc = sqlite3_step(insert);
      sqlite3_reset(insert);
      if (rc != SQLITE_DONE) {
        sqlite3_finalize(insert);
        throw std::runtime_error(std::string("sqlite step: ") + sqlite3_errmsg(db_));
      }
    }
    sqlite3_finalize(insert);
    exec("COMMIT");
  } catch (...) {
    exec("ROLLBACK");
    throw;
  }
  pending_steps_.clear();
}

std::vector<v1::Job> JobStore::load_jobs(std::vector<int64_t>& sequences) {
  std::vector<v1::Job> jobs;
  Statement select(db_,
                   "SELECT job_id, spec, state, worker_ids, result_json, error, grp, sequence "
                   "FROM jobs ORDER BY sequence");
  while (select.step()) {
    v1::Job job;
    job.set_job_id(select.column_text(0));
    job.mutable_spec()->ParseFromString(select.column_text(1));
    v1::JobState state;
    v1::JobState_Parse(select.column_text(2), &state);
    job.set_state(state);
    const std::string workers = select.column_text(3);
    for (size_t start = 0; start < workers.size();) {
      size_t end = workers.find(',', start);
      if (end == std::string::npos) end = workers.size();
      job.add_worker_ids(workers.substr(start, end - start));
      start = end + 1;
    }
    job.set_result_json(select.column_text(4));
    job.set_error(select.column_text(5));
    job.mutable_group()->ParseFromString(select.column_text(6));
    sequences.push_back(select.column_int(7));
    Statement history(db_,
                      "SELECT state_code, unix_time, reason FROM transitions WHERE job_id = ?1 "
                      "ORDER BY rowid");
    history.text(1, job.job_id());
    while (history.step()) {
      auto* t = job.add_history();
      t->set_state(static_cast<v1::JobState>(history.column_int(0)));
      t->set_unix_time(history.column_real(1));
      t->set_reason(history.column_text(2));
    }
    Statement incidents(db_,
                        "SELECT unix_time, kind, rank, message FROM incidents WHERE job_id = ?1 "
                        "ORDER BY rowid");
    incidents.text(1, job.job_id());
    while (incidents.step()) {
      auto* i = job.add_incidents();
      i->set_unix_time(incidents.column_real(0));
      i->set_kind(incidents.column_text(1));
      i->set_rank(static_cast<int32_t>(incidents.column_int(2)));
      i->set_message(incidents.column_text(3));
    }
    Statement ranks(db_, "SELECT status FROM ranks WHERE job_id = ?1 ORDER BY rank");
    ranks.text(1, job.job_id());
    while (ranks.step()) job.add_ranks()->ParseFromString(ranks.column_text(0));
    jobs.push_back(std::move(job));
  }
  return jobs;
}

std::vector<v1::StepReport> JobStore::load_steps(const std::string& job_id) {
  flush_steps();
  std::vector<v1::StepReport> steps;
  Statement select(db_, "SELECT report FROM steps WHERE job_id = ?1 ORDER BY step, rank");
  select.text(1, job_id);
  while (select.step()) {
    steps.emplace_back();
    steps.back().ParseFromString(select.column_text(0));
  }
  return steps;
}

int64_t JobStore::max_sequence() {
  Statement select(db_, "SELECT COALESCE(MAX(sequence), 0) FROM jobs");
  select.step();
  return select.column_int(0);
}

}  // namespace ddpd::coordinator
