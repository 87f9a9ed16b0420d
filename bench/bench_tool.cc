// attnkit_bench_tool: the history store, the regression gate and the
// dashboard behind `./attnkit bench` and `./attnkit dashboard`.
//
//   ingest FILE...        store Google Benchmark JSON runs; prints their ids
//   runs                  list the stored runs
//   compare BASE NEW      gate NEW against BASE; exit 1 on a regression
//   dashboard [-o FILE]   write the HTML page (default: bench_dashboard.html)
//   summary RUN           calibration and %peak per backend and suite, and
//                         every decode benchmark as a % of the same run's
//                         read bandwidth (pct_read_bw_same_run); each
//                         paired prefill against its FMA loop
//                         (pct_fma_paired)
//   ab --base-bin B --new-bin N
//                         interleaved A/B of two benchmark binaries (ab.h);
//                         exit 1 when a benchmark is slower or fails
// Common flags: --db PATH (default $ATTNKIT_HISTORY_DB or
// ~/.attnkit/history.sqlite). BASE and NEW are run ids, latest, latest~N, sha
// prefixes, or paths of JSON files (read without storing).
//
// Nothing read from a file or the store reaches the terminal unescaped:
// every line goes out through TerminalSafe (a benchmark named with an escape
// sequence prints as "\x1b[...", it does not recolour the terminal).
#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "bench/ab.h"
#include "bench/compare.h"
#include "bench/dashboard.h"
#include "bench/decode_bandwidth.h"
#include "bench/history.h"
#include "bench/prefill_paired.h"
#include "bench/run_data.h"
#include "runtime/flags.h"
#include "runtime/stats.h"

namespace attnkit::bench {
namespace {

constexpr const char* kCommands =
    "commands:\n"
    "  ingest FILE...            store Google Benchmark JSON runs\n"
    "  runs                      list stored runs\n"
    "  compare BASE NEW [--alpha A] [--threshold T] [--allow-missing]\n"
    "                            regression gate; BASE/NEW: run id, latest\n"
    "                            (the run ingested last), latest~N (N runs\n"
    "                            ingested before it), sha prefix, or a .json\n"
    "                            file\n"
    "  dashboard [-o FILE] [--host HOST]\n"
    "                            write the static HTML dashboard\n"
    "  summary RUN               calibration and %peak per backend and "
    "suite;\n"
    "                            decode GB/s as % of the same run's\n"
    "                            calibration/read_bw "
    "(pct_read_bw_same_run);\n"
    "                            paired prefill against its FMA loop\n"
    "                            (pct_fma_paired)\n"
    "  ab --base-bin B --new-bin N [--filter RE] [--rounds N]\n"
    "     [--min-time S] [--threshold T]\n"
    "                            interleaved A/B of two attnkit_bench\n"
    "                            binaries: each benchmark run by both in\n"
    "                            turn, round after round; per benchmark the\n"
    "                            median NEW / BASE time ratio [quartiles]\n"
    "                            and both sides' % of their limit\n"
    "Exit status:\n"
    "  0  done; compare: the gate passed (every benchmark of BASE is in NEW\n"
    "     and none regressed)\n"
    "  1  compare: the gate failed: a regression (time, allocs or bytes\n"
    "     copied per step, a failed output check), a >= threshold slowdown\n"
    "     with too few repetitions to decide, a benchmark of BASE missing\n"
    "     from NEW (unless --allow-missing), or no benchmark in both runs\n"
    "     ab: a benchmark slower (median ratio >= 1 + T and its lower\n"
    "     quartile > 1) or failed in either binary, or no benchmark in both\n"
    "  2  bad usage or bad input (a malformed JSON file, an unknown run, a\n"
    "     binary that cannot list its benchmarks); ingest then stores\n"
    "     nothing\n";

// Every byte the tool prints goes through these: names, messages and file
// names come from files and the store, and may hold escape sequences.
void Out(const std::string& text) {
  std::fputs(TerminalSafe(text, /*keep_newlines=*/true).c_str(), stdout);
}

int Fail(const Status& s) {
  std::fprintf(stderr, "attnkit bench: %s\n",
               TerminalSafe(s.ToString()).c_str());
  return 2;
}

// printf through Out.
__attribute__((format(printf, 1, 2))) void Printf(const char* fmt, ...) {
  std::va_list args, again;
  va_start(args, fmt);
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, fmt, args);
  va_end(args);
  std::string s(static_cast<size_t>(n > 0 ? n : 0) + 1, '\0');
  std::vsnprintf(s.data(), s.size(), fmt, again);
  va_end(again);
  s.resize(s.size() - 1);
  Out(s);
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

// A Custom flag's setter for a number strictly between 0 and 1.
FlagParser::Setter Fraction(double* target) {
  return [target](std::string_view v) -> std::string {
    const std::string text(v);
    char* end = nullptr;
    const double d = std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size() ||
        !(d > 0 && d < 1)) {
      return "not a number in (0, 1)";
    }
    *target = d;
    return "";
  };
}

// Per backend and suite: how many benchmarks report pct_peak, and the
// median, min and max of their median %peak; for decode also the median of
// pct_read_bw_same_run. Then every decode benchmark against the run's own
// read bandwidth.
void PrintSummary(const RunData& run) {
  auto field = [&](const char* key) { return ContextValue(run.info, key); };
  Printf(
      "calibration at start of run (%s, %s threads): FMA peak %s GFLOPS on 1 "
      "thread, %s GFLOPS on all; read bandwidth %s GB/s\n",
      field("fma_isa").c_str(), field("omp_threads").c_str(),
      field("calib_fma_gflops_1t").c_str(),
      field("calib_fma_gflops_all").c_str(),
      field("calib_read_gbps_all").c_str());
  const DecodeBandwidthReport decode = DecodeVsReadBandwidth(run);
  std::map<std::string, double> same_run;
  for (const DecodeBandwidthRow& r : decode.rows) {
    if (!std::isnan(r.pct_read_bw_same_run)) {
      same_run[r.benchmark] = r.pct_read_bw_same_run;
    }
  }
  struct Group {
    std::vector<double> pct_peak, same_run;
  };
  std::map<std::pair<std::string, std::string>, Group> groups;
  for (const auto& [name, s] : run.benchmarks) {
    const std::vector<double>* m = FindMetric(s, "pct_peak");
    if (m == nullptr) continue;
    const size_t a = name.find('/'), b = name.find('/', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    Group& g = groups[{name.substr(a + 1, b - a - 1), name.substr(0, a)}];
    g.pct_peak.push_back(Median(*m));
    if (auto r = same_run.find(name); r != same_run.end()) {
      g.same_run.push_back(r->second);
    }
  }
  Printf("%-12s %-10s %6s %14s %18s %21s\n", "backend", "suite", "count",
         "median %peak", "min..max %peak",
         std::string(kPctReadBwSameRun).c_str());
  for (auto& [key, g] : groups) {
    const auto [lo, hi] =
        std::minmax_element(g.pct_peak.begin(), g.pct_peak.end());
    char range[64], same[32] = "-";
    std::snprintf(range, sizeof(range), "%.2f..%.2f", *lo, *hi);
    if (key.second == "decode") {
      if (g.same_run.empty()) {
        std::snprintf(same, sizeof(same), "n/a");
      } else {
        std::snprintf(same, sizeof(same), "%.2f", Median(g.same_run));
      }
    }
    Printf("%-12s %-10s %6zu %14.2f %18s %21s\n", key.first.c_str(),
           key.second.c_str(), g.pct_peak.size(), Median(g.pct_peak), range,
           same);
  }
  Printf(
      "(prefill %%peak: of the FMA peak, the larger of 1 and all threads; "
      "decode %%peak: of the start-of-run read bandwidth; %s: median decode "
      "GB/s over the median calibration/read_bw GB/s of this run)\n\n",
      std::string(kPctReadBwSameRun).c_str());
  Out(FormatDecodeBandwidth(decode));
  if (const std::string prefill = FormatPrefillPaired(PrefillVsPairedFma(run));
      !prefill.empty()) {
    Out("\n" + prefill);
  }
}

int Main(int argc, char** argv) {
  std::string db = DefaultHistoryPath(), out = "bench_dashboard.html", host;
  CompareOptions options;
  AbOptions ab;
  int64_t rounds = ab.rounds;
  std::vector<std::string> pos;
  FlagParser flags("attnkit_bench_tool <command> [--db PATH] [args]");
  flags
      .String("--db", &db, "PATH",
              "the history store (default $ATTNKIT_HISTORY_DB or\n"
              "~/.attnkit/history.sqlite)")
      .String("-o", &out, "FILE", "dashboard: the page to write")
      .String("--host", &host, "HOST",
              "dashboard: the host whose runs to plot (default: the\n"
              "latest run's)")
      .Custom("--alpha", "A",
              "compare: Mann-Whitney significance level (default 0.01)",
              Fraction(&options.alpha))
      .Custom("--threshold", "T",
              "compare, ab: the smallest slowdown that fails (default 0.05)",
              Fraction(&options.min_slowdown))
      .NonEmptyString("--base-bin", &ab.base_bin, "PATH",
                      "ab: the BASE benchmark binary")
      .NonEmptyString("--new-bin", &ab.new_bin, "PATH",
                      "ab: the NEW benchmark binary")
      .String("--filter", &ab.filter, "RE",
              "ab: the benchmarks (a --benchmark_filter; default all)")
      .Int64("--rounds", &rounds, 1, 1000,
             "ab: rounds, each benchmark once per binary (default 8)")
      .Seconds("--min-time", &ab.min_time, 60,
               "ab: --benchmark_min_time of each run (default 0.2)")
      .Bool("--allow-missing", &options.allow_missing,
            "compare: benchmarks of BASE absent from NEW are listed as\n"
            "gone, not failures (a filtered NEW run)")
      .Positional(&pos)
      .Epilogue(kCommands);
  if (Status s = flags.Parse(argc - 1, argv + 1); !s.ok()) return Fail(s);
  if (flags.help()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  if (pos.empty()) {
    std::fputs(flags.Usage().c_str(), stderr);
    return 2;
  }
  const std::string cmd = pos.front();
  pos.erase(pos.begin());

  if (cmd == "ingest") {
    if (pos.empty()) return Fail(Status::InvalidArgument("ingest: no FILE"));
    // All or nothing: every file is read and checked first, then all are
    // stored in one transaction. A bad file stores none of them.
    std::vector<RunData> runs;
    for (const std::string& f : pos) {
      auto run = ReadGoogleBenchmarkJsonFile(f);
      if (!run.ok()) {
        return Fail(Status(
            run.status().code(),
            "ingest: nothing stored: " + std::string(run.status().message())));
      }
      runs.push_back(std::move(*run));
    }
    auto store = HistoryStore::Open(db);
    if (!store.ok()) return Fail(store.status());
    auto ids = store->IngestAll(runs);
    if (!ids.ok()) return Fail(ids.status());
    for (size_t i = 0; i < runs.size(); ++i) {
      const RunData& run = runs[i];
      Printf("run %lld: %s (%s, %zu benchmarks) from %s -> %s\n",
             static_cast<long long>((*ids)[i]), run.info.sha.c_str(),
             run.info.date.c_str(), run.benchmarks.size(),
             run.info.source.c_str(), db.c_str());
    }
    return 0;
  }
  if (cmd == "runs") {
    auto store = HistoryStore::Open(db);
    if (!store.ok()) return Fail(store.status());
    auto runs = store->ListRuns();
    if (!runs.ok()) return Fail(runs.status());
    Printf("%-5s %-12s %-26s %-12s %s\n", "id", "sha", "date", "host",
           "source");
    for (const RunInfo& r : *runs) {
      Printf("%-5lld %-12s %-26s %-12s %s%s\n", static_cast<long long>(r.id),
             (r.sha.substr(0, 10) + (r.dirty ? "+" : "")).c_str(),
             r.date.c_str(), r.host.c_str(), r.source.c_str(),
             r.quick ? " (quick)" : "");
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
    Out(FormatCompareTable(report, base->info, next->info));
    return report.failed() ? 1 : 0;
  }
  if (cmd == "ab") {
    if (!pos.empty()) {
      return Fail(
          Status::InvalidArgument("ab: unexpected argument '" + pos[0] + "'"));
    }
    if (ab.base_bin.empty() || ab.new_bin.empty()) {
      return Fail(
          Status::InvalidArgument("ab: needs --base-bin and --new-bin"));
    }
    ab.rounds = static_cast<int>(rounds);
    ab.threshold = options.min_slowdown;
    std::vector<std::string> only_new;
    auto rows = RunAb(ab, &only_new);
    if (!rows.ok()) return Fail(rows.status());
    Out(FormatAbTable(*rows, ab.threshold, ab.base_bin, ab.new_bin));
    for (const std::string& n : only_new) Out("only in NEW: " + n + "\n");
    if (rows->empty()) Out("no benchmark in both binaries\n");
    return AbExitStatus(*rows, ab.threshold);
  }
  if (cmd == "summary") {
    if (pos.size() != 1) {
      return Fail(Status::InvalidArgument("summary: expected one RUN"));
    }
    auto run = LoadSpec(db, pos[0]);
    if (!run.ok()) return Fail(run.status());
    PrintSummary(*run);
    return 0;
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
    Printf("dashboard: %zu runs of host %s -> %s\n", runs.size(),
           host.empty() ? "-" : host.c_str(), out.c_str());
    return 0;
  }
  std::fprintf(stderr, "attnkit bench: unknown command '%s'\n%s",
               TerminalSafe(cmd).c_str(), flags.Usage().c_str());
  return 2;
}

}  // namespace
}  // namespace attnkit::bench

int main(int argc, char** argv) { return attnkit::bench::Main(argc, argv); }
