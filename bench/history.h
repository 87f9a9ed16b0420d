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

  // Every run, oldest first (by date, then id).
  StatusOr<std::vector<RunInfo>> ListRuns() const;
  StatusOr<RunData> LoadRun(int64_t id) const;

  // A run by spec: its id ("42"), "latest", "latest~N" (N runs before the
  // latest), or a commit sha prefix of >= 4 hex digits (that commit's newest
  // run). NOT_FOUND / INVALID_ARGUMENT name the spec.
  StatusOr<RunData> Resolve(std::string_view spec) const;

 private:
  explicit HistoryStore(sqlite3* db) : db_(db) {}
  sqlite3* db_ = nullptr;
};

}  // namespace attnkit::bench

#endif  // ATTNKIT_BENCH_HISTORY_H_
