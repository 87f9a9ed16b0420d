// The benchmark history store: one SQLite file holding every ingested run
// (sha, date, host, context) and every repetition's value of every metric, so
// the gate can test any two runs and the dashboard can plot any history.
//
// Default file: $ATTNKIT_HISTORY_DB, else ~/.attnkit/history.sqlite. Not the
// build dir: build dirs are per worktree and disposable, while the history is
// about commits across branches and builds of this machine. Runs carry their
// host; compare and dashboard never mix hosts silently.
#ifndef ATTNKIT_BENCH_HISTORY_H_
#define ATTNKIT_BENCH_HISTORY_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "bench/run_data.h"
#include "runtime/status.h"

struct sqlite3;

namespace attnkit::bench {

std::string DefaultHistoryPath();

class HistoryStore {
 public:
  // Opens (creating the file, its directory and the schema if needed).
  static StatusOr<HistoryStore> Open(const std::string& path);
  ~HistoryStore();
  HistoryStore(HistoryStore&& o) noexcept;
  HistoryStore& operator=(HistoryStore&& o) noexcept;
  HistoryStore(const HistoryStore&) = delete;
  HistoryStore& operator=(const HistoryStore&) = delete;

  // Stores the run in one transaction and returns its id. Ingesting the same
  // run again (same sha, date, host and source) returns the existing id.
  StatusOr<int64_t> Ingest(const RunData& run);
  // Stores every run in one transaction, all or nothing: on any failure
  // nothing is stored and the error names the run's source. Ids in order.
  StatusOr<std::vector<int64_t>> IngestAll(const std::vector<RunData>& runs);

  // Every run in ingestion order (by id), oldest first. Not by date: a date
  // comes from the run's JSON (a clock, a hand-edited file) and the order
  // `latest` names must be the one runs arrived in.
  StatusOr<std::vector<RunInfo>> ListRuns() const;
  StatusOr<RunData> LoadRun(int64_t id) const;

  // A run by spec: its id ("42"), "latest" (the run ingested last),
  // "latest~N" (N runs ingested before it), or a commit sha prefix of >= 4
  // hex digits (that commit's last ingested run). NOT_FOUND /
  // INVALID_ARGUMENT name the spec.
  StatusOr<RunData> Resolve(std::string_view spec) const;

 private:
  explicit HistoryStore(sqlite3* db) : db_(db) {}
  // Ingest's inserts, inside a transaction the caller opened.
  StatusOr<int64_t> InsertRun(const RunData& run);
  sqlite3* db_ = nullptr;
};

}  // namespace attnkit::bench

#endif  // ATTNKIT_BENCH_HISTORY_H_
