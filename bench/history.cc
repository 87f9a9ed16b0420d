#include "bench/history.h"

#include <sqlite3.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

namespace attnkit::bench {
namespace {

constexpr const char* kSchema = R"sql(
PRAGMA foreign_keys = ON;
CREATE TABLE IF NOT EXISTS runs (
  id      INTEGER PRIMARY KEY AUTOINCREMENT,
  sha     TEXT    NOT NULL,
  dirty   INTEGER NOT NULL,
  date    TEXT    NOT NULL,
  host    TEXT    NOT NULL,
  quick   INTEGER NOT NULL,
  source  TEXT    NOT NULL,
  context TEXT    NOT NULL,
  UNIQUE (sha, date, host, source)
);
CREATE TABLE IF NOT EXISTS samples (
  run_id     INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  benchmark  TEXT    NOT NULL,
  metric     TEXT    NOT NULL,
  repetition INTEGER NOT NULL,
  value      REAL    NOT NULL,
  PRIMARY KEY (run_id, benchmark, metric, repetition)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS errors (
  run_id    INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  benchmark TEXT    NOT NULL,
  message   TEXT    NOT NULL,
  PRIMARY KEY (run_id, benchmark)
);
PRAGMA user_version = 1;
)sql";

Status SqlError(sqlite3* db, const std::string& what) {
  return Status::Internal("history store: " + what + ": " +
                          (db != nullptr ? sqlite3_errmsg(db) : "no database"));
}

// A prepared statement, finalized on scope exit.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr);
  }
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  bool ok() const { return rc_ == SQLITE_OK; }
  sqlite3_stmt* get() const { return s_; }
  void Bind(int i, std::string_view v) {
    sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()),
                      SQLITE_TRANSIENT);
  }
  void Bind(int i, int64_t v) { sqlite3_bind_int64(s_, i, v); }
  void Bind(int i, double v) { sqlite3_bind_double(s_, i, v); }
  int Step() { return sqlite3_step(s_); }
  void Reset() {
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
  }
  std::string Text(int col) const {
    const unsigned char* t = sqlite3_column_text(s_, col);
    return t != nullptr ? reinterpret_cast<const char*>(t) : "";
  }
  int64_t Int(int col) const { return sqlite3_column_int64(s_, col); }
  double Real(int col) const { return sqlite3_column_double(s_, col); }

 private:
  sqlite3_stmt* s_ = nullptr;
  int rc_;
};

constexpr const char* kRunColumns =
    "id, sha, dirty, date, host, quick, source, context";

RunInfo ReadRunInfo(const Stmt& st) {
  RunInfo r;
  r.id = st.Int(0);
  r.sha = st.Text(1);
  r.dirty = st.Int(2) != 0;
  r.date = st.Text(3);
  r.host = st.Text(4);
  r.quick = st.Int(5) != 0;
  r.source = st.Text(6);
  r.context_json = st.Text(7);
  return r;
}

}  // namespace

std::string DefaultHistoryPath() {
  if (const char* p = std::getenv("ATTNKIT_HISTORY_DB"); p && *p) return p;
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr && *home ? home : ".") +
         "/.attnkit/history.sqlite";
}

StatusOr<HistoryStore> HistoryStore::Open(const std::string& path) {
  if (path.empty()) {
    return Status::InvalidArgument("history store: path is empty");
  }
  const std::filesystem::path parent =
      std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    if (ec) {
      return Status::InvalidArgument("history store: cannot create directory " +
                                     parent.string() + ": " + ec.message());
    }
  }
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                      nullptr) != SQLITE_OK) {
    Status s = SqlError(db, "cannot open " + path);
    sqlite3_close(db);
    return s;
  }
  sqlite3_busy_timeout(db, 5000);  // two runs ingesting at once wait, not fail
  HistoryStore store(db);
  char* err = nullptr;
  if (sqlite3_exec(db, kSchema, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err != nullptr ? err : "?";
    sqlite3_free(err);
    return Status::Internal("history store: schema of " + path + ": " + msg);
  }
  return store;
}

HistoryStore::~HistoryStore() { sqlite3_close(db_); }
HistoryStore::HistoryStore(HistoryStore&& o) noexcept
    : db_(std::exchange(o.db_, nullptr)) {}
HistoryStore& HistoryStore::operator=(HistoryStore&& o) noexcept {
  if (this != &o) {
    sqlite3_close(db_);
    db_ = std::exchange(o.db_, nullptr);
  }
  return *this;
}

StatusOr<int64_t> HistoryStore::InsertRun(const RunData& run) {
  {
    Stmt find(db_,
              "SELECT id FROM runs WHERE sha=? AND date=? AND host=? AND "
              "source=?");
    if (!find.ok()) return SqlError(db_, "prepare");
    find.Bind(1, run.info.sha);
    find.Bind(2, run.info.date);
    find.Bind(3, run.info.host);
    find.Bind(4, run.info.source);
    if (find.Step() == SQLITE_ROW) return find.Int(0);
  }
  int64_t id = 0;
  {
    Stmt ins(db_,
             "INSERT INTO runs (sha, dirty, date, host, quick, source, "
             "context) VALUES (?, ?, ?, ?, ?, ?, ?)");
    if (!ins.ok()) return SqlError(db_, "prepare run insert");
    ins.Bind(1, run.info.sha);
    ins.Bind(2, int64_t{run.info.dirty});
    ins.Bind(3, run.info.date);
    ins.Bind(4, run.info.host);
    ins.Bind(5, int64_t{run.info.quick});
    ins.Bind(6, run.info.source);
    ins.Bind(7, run.info.context_json);
    if (ins.Step() != SQLITE_DONE) return SqlError(db_, "insert run");
    id = sqlite3_last_insert_rowid(db_);
  }
  Stmt sample(db_,
              "INSERT INTO samples (run_id, benchmark, metric, repetition, "
              "value) VALUES (?, ?, ?, ?, ?)");
  Stmt error(db_,
             "INSERT INTO errors (run_id, benchmark, message) VALUES (?, ?, "
             "?)");
  if (!sample.ok() || !error.ok()) {
    return SqlError(db_, "prepare sample insert");
  }
  for (const auto& [name, s] : run.benchmarks) {
    if (!s.error.empty()) {
      error.Bind(1, id);
      error.Bind(2, name);
      error.Bind(3, s.error);
      if (error.Step() != SQLITE_DONE) {
        return SqlError(db_, "insert error of " + name);
      }
      error.Reset();
    }
    for (const auto& [metric, values] : s.metrics) {
      for (size_t r = 0; r < values.size(); ++r) {
        sample.Bind(1, id);
        sample.Bind(2, name);
        sample.Bind(3, metric);
        sample.Bind(4, static_cast<int64_t>(r));
        sample.Bind(5, values[r]);
        if (sample.Step() != SQLITE_DONE) {
          return SqlError(db_, "insert " + name + " " + metric);
        }
        sample.Reset();
      }
    }
  }
  return id;
}

StatusOr<int64_t> HistoryStore::Ingest(const RunData& run) {
  ATTNKIT_ASSIGN_OR_RETURN(std::vector<int64_t> ids, IngestAll({run}));
  return ids.front();
}

StatusOr<std::vector<int64_t>> HistoryStore::IngestAll(
    const std::vector<RunData>& runs) {
  if (sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) !=
      SQLITE_OK) {
    return SqlError(db_, "begin");
  }
  std::vector<int64_t> ids;
  for (const RunData& run : runs) {
    StatusOr<int64_t> id = InsertRun(run);
    if (!id.ok()) {
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      return Status(id.status().code(),
                    "history store: nothing stored: run from " +
                        run.info.source + ": " +
                        std::string(id.status().message()));
    }
    ids.push_back(*id);
  }
  if (sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) {
    Status s = SqlError(db_, "commit (nothing stored)");
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return s;
  }
  return ids;
}

StatusOr<std::vector<RunInfo>> HistoryStore::ListRuns() const {
  Stmt st(db_, (std::string("SELECT ") + kRunColumns + " FROM runs ORDER BY id")
                   .c_str());
  if (!st.ok()) return SqlError(db_, "list runs");
  std::vector<RunInfo> runs;
  int rc;
  while ((rc = st.Step()) == SQLITE_ROW) runs.push_back(ReadRunInfo(st));
  if (rc != SQLITE_DONE) return SqlError(db_, "list runs");
  return runs;
}

StatusOr<RunData> HistoryStore::LoadRun(int64_t id) const {
  RunData run;
  {
    Stmt st(db_,
            (std::string("SELECT ") + kRunColumns + " FROM runs WHERE id = ?")
                .c_str());
    if (!st.ok()) return SqlError(db_, "load run");
    st.Bind(1, id);
    if (st.Step() != SQLITE_ROW) {
      return Status::NotFound("history store: no run with id " +
                              std::to_string(id));
    }
    run.info = ReadRunInfo(st);
  }
  Stmt st(db_,
          "SELECT benchmark, metric, value FROM samples WHERE run_id = ? "
          "ORDER BY benchmark, metric, repetition");
  if (!st.ok()) return SqlError(db_, "load samples");
  st.Bind(1, id);
  while (st.Step() == SQLITE_ROW) {
    run.benchmarks[st.Text(0)].metrics[st.Text(1)].push_back(st.Real(2));
  }
  Stmt er(db_, "SELECT benchmark, message FROM errors WHERE run_id = ?");
  if (!er.ok()) return SqlError(db_, "load errors");
  er.Bind(1, id);
  while (er.Step() == SQLITE_ROW) run.benchmarks[er.Text(0)].error = er.Text(1);
  return run;
}

namespace {

bool AllDigits(std::string_view t) {
  return !t.empty() && std::all_of(t.begin(), t.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) != 0;
  });
}

// Decimal digits as an int64; nullopt when they overflow it.
std::optional<int64_t> ParseCount(std::string_view t) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || end != t.data() + t.size()) return std::nullopt;
  return v;
}

}  // namespace

StatusOr<RunData> HistoryStore::Resolve(std::string_view spec) const {
  const std::string s(spec);
  ATTNKIT_ASSIGN_OR_RETURN(std::vector<RunInfo> runs, ListRuns());
  if (s == "latest" || s.rfind("latest~", 0) == 0) {
    int64_t back = 0;
    if (s != "latest") {
      const std::string n = s.substr(7);
      const std::optional<int64_t> v =
          AllDigits(n) ? ParseCount(n) : std::nullopt;
      if (!v) {
        return Status::InvalidArgument(
            "run spec '" + s + "': N='" + n +
            "' is not a number in [0, 2^63): expected latest~N, N runs "
            "ingested before the latest");
      }
      back = *v;
    }
    if (back >= static_cast<int64_t>(runs.size())) {
      return Status::NotFound(
          "run spec '" + s + "': the store holds " +
          std::to_string(runs.size()) + " runs" +
          (runs.empty() ? std::string()
                        : " (latest~0 to latest~" +
                              std::to_string(runs.size() - 1) + ")"));
    }
    return LoadRun(runs[runs.size() - 1 - static_cast<size_t>(back)].id);
  }
  // All digits: an id when such a run exists, else (4+ digits) a sha prefix.
  if (AllDigits(s)) {
    if (const std::optional<int64_t> id = ParseCount(s)) {
      for (const RunInfo& r : runs) {
        if (r.id == *id) return LoadRun(*id);
      }
    }
  }
  const bool hex = s.size() >= 4 && std::all_of(s.begin(), s.end(), [](char c) {
                     return std::isxdigit(static_cast<unsigned char>(c)) != 0;
                   });
  if (!hex) {
    return Status::InvalidArgument(
        "run spec '" + s +
        "': expected a run id, latest, latest~N, or a sha prefix (>= 4 hex "
        "digits)");
  }
  for (auto it = runs.rbegin(); it != runs.rend(); ++it) {
    if (it->sha.rfind(s, 0) == 0) return LoadRun(it->id);
  }
  return Status::NotFound("run spec '" + s + "': no run of a commit " + s +
                          "* in the store");
}

}  // namespace attnkit::bench
