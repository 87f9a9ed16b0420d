// attnkit_bench_tool: the history store, the regression gate and the
// dashboard behind `./attnkit bench` and `./attnkit dashboard`.
//
//   ingest FILE...        store Google Benchmark JSON runs; prints their ids
//   runs                  list the stored runs
//   compare BASE NEW      gate NEW against BASE; exit 1 on a regression
//   dashboard [-o FILE]   write the HTML page (default: bench_dashboard.html)
// Common flags: --db PATH (default $ATTNKIT_HISTORY_DB or
// ~/.attnkit/history.sqlite). BASE and NEW are run ids, latest, latest~N, sha
// prefixes, or paths of JSON files (read without storing).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "bench/compare.h"
#include "bench/dashboard.h"
#include "bench/history.h"
#include "bench/run_data.h"

namespace attnkit::bench {
namespace {

constexpr const char* kUsage =
    "usage: attnkit_bench_tool <command> [--db PATH] [args]\n"
    "  ingest FILE...            store Google Benchmark JSON runs\n"
    "  runs                      list stored runs\n"
    "  compare BASE NEW [--alpha A] [--threshold T]\n"
    "                            regression gate (exit 1 on a regression);\n"
    "                            BASE/NEW: run id, latest, latest~N, sha\n"
    "                            prefix, or a .json file\n"
    "  dashboard [-o FILE] [--host HOST]\n"
    "                            write the static HTML dashboard\n";

int Fail(const Status& s) {
  std::fprintf(stderr, "attnkit bench: %s\n", s.ToString().c_str());
  return 2;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.substr(s.size() - suffix.size()) == suffix;
}

StatusOr<RunData> LoadSpec(const std::string& db, const std::string& spec) {
  if (EndsWith(spec, ".json")) return ReadGoogleBenchmarkJsonFile(spec);
  ATTNKIT_ASSIGN_OR_RETURN(HistoryStore store, HistoryStore::Open(db));
  return store.Resolve(spec);
}

StatusOr<double> ParseFraction(const std::string& flag,
                               const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(v > 0 && v < 1)) {
    return Status::InvalidArgument(flag + "=" + text +
                                   " (expected a number in (0, 1))");
  }
  return v;
}

int Main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string cmd = argv[1];
  std::string db = DefaultHistoryPath(), out = "bench_dashboard.html", host;
  CompareOptions options;
  std::vector<std::string> pos;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> StatusOr<std::string> {
      if (i + 1 >= argc) {
        return Status::InvalidArgument(a + " needs a value");
      }
      return std::string(argv[++i]);
    };
    if (a == "--db" || a == "-o" || a == "--host" || a == "--alpha" ||
        a == "--threshold") {
      auto v = value();
      if (!v.ok()) return Fail(v.status());
      if (a == "--db") db = *v;
      if (a == "-o") out = *v;
      if (a == "--host") host = *v;
      if (a == "--alpha" || a == "--threshold") {
        auto f = ParseFraction(a, *v);
        if (!f.ok()) return Fail(f.status());
        (a == "--alpha" ? options.alpha : options.min_slowdown) = *f;
      }
    } else if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else {
      pos.push_back(a);
    }
  }

  if (cmd == "ingest") {
    if (pos.empty()) return Fail(Status::InvalidArgument("ingest: no FILE"));
    auto store = HistoryStore::Open(db);
    if (!store.ok()) return Fail(store.status());
    for (const std::string& f : pos) {
      auto run = ReadGoogleBenchmarkJsonFile(f);
      if (!run.ok()) return Fail(run.status());
      auto id = store->Ingest(*run);
      if (!id.ok()) return Fail(id.status());
      std::printf("run %lld: %s (%s, %zu benchmarks) -> %s\n",
                  static_cast<long long>(*id), run->info.sha.c_str(),
                  run->info.date.c_str(), run->benchmarks.size(), db.c_str());
    }
    return 0;
  }
  if (cmd == "runs") {
    auto store = HistoryStore::Open(db);
    if (!store.ok()) return Fail(store.status());
    auto runs = store->ListRuns();
    if (!runs.ok()) return Fail(runs.status());
    std::printf("%-5s %-12s %-26s %-12s %s\n", "id", "sha", "date", "host",
                "source");
    for (const RunInfo& r : *runs) {
      std::printf(
          "%-5lld %-12s %-26s %-12s %s%s\n", static_cast<long long>(r.id),
          (r.sha.substr(0, 10) + (r.dirty ? "+" : "")).c_str(), r.date.c_str(),
          r.host.c_str(), r.source.c_str(), r.quick ? " (quick)" : "");
    }
    return 0;
  }
  if (cmd == "compare") {
    if (pos.size() != 2) {
      return Fail(Status::InvalidArgument("compare: expected BASE NEW, got " +
                                          std::to_string(pos.size()) +
                                          " arguments"));
    }
    auto base = LoadSpec(db, pos[0]);
    if (!base.ok()) return Fail(base.status());
    auto next = LoadSpec(db, pos[1]);
    if (!next.ok()) return Fail(next.status());
    const CompareReport report = CompareRuns(*base, *next, options);
    std::fputs(FormatCompareTable(report, base->info, next->info).c_str(),
               stdout);
    return report.failed() ? 1 : 0;
  }
  if (cmd == "dashboard") {
    auto store = HistoryStore::Open(db);
    if (!store.ok()) return Fail(store.status());
    auto infos = store->ListRuns();
    if (!infos.ok()) return Fail(infos.status());
    if (host.empty() && !infos->empty()) host = infos->back().host;
    std::vector<RunData> runs;
    for (const RunInfo& r : *infos) {
      if (r.host != host) continue;
      auto run = store->LoadRun(r.id);
      if (!run.ok()) return Fail(run.status());
      runs.push_back(std::move(*run));
    }
    std::ofstream f(out);
    f << RenderDashboard(runs, options);
    f.close();
    if (!f) return Fail(Status::InvalidArgument("cannot write " + out));
    std::printf("dashboard: %zu runs of host %s -> %s\n", runs.size(),
                host.empty() ? "-" : host.c_str(), out.c_str());
    return 0;
  }
  std::fprintf(stderr, "attnkit bench: unknown command '%s'\n%s", cmd.c_str(),
               kUsage);
  return 2;
}

}  // namespace
}  // namespace attnkit::bench

int main(int argc, char** argv) { return attnkit::bench::Main(argc, argv); }
