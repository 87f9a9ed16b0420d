#include "bench/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "bench/decode_bandwidth.h"
#include "bench/stats.h"
#include "runtime/stats.h"

namespace attnkit::bench {
namespace {

// Exact metrics travel through JSON text; a relative slack of 1e-9 absorbs
// printing round-trips and nothing else (one allocation more per step at
// 1e6 allocations is 1e-6).
constexpr double kExactSlack = 1e-9;

double Max(const std::vector<double>& v) {
  return *std::max_element(v.begin(), v.end());
}

// The smallest two-sided p the test can give samples of these sizes: that of
// complete separation without ties. 2 / C(n1 + n2, n1) when exact: 0.1 for
// 3 + 3, 0.029 for 4 + 4, 0.0079 for 5 + 5.
double SmallestP(size_t n_new, size_t n_old) {
  if (n_new == 0 || n_old == 0) return 1;
  std::vector<double> x(n_new), y(n_old);
  for (size_t i = 0; i < n_old; ++i) y[i] = static_cast<double>(i);
  for (size_t i = 0; i < n_new; ++i) x[i] = static_cast<double>(n_old + i);
  auto mw = MannWhitneyU(x, y);
  return mw.ok() ? mw->p : 1;
}

void CompareTime(const std::vector<double>& a, const std::vector<double>& b,
                 const CompareOptions& o, CompareRow& row) {
  row.metric = std::string(kTimeMetric);
  row.old_value = Median(a);
  row.new_value = Median(b);
  row.n_old = a.size();
  row.n_new = b.size();
  row.ratio = row.old_value > 0   ? row.new_value / row.old_value
              : row.new_value > 0 ? INFINITY
                                  : NAN;
  const bool slower = row.ratio >= 1 + o.min_slowdown;
  auto mw = MannWhitneyU(b, a);
  if (mw.ok()) row.p = mw->p;
  // A slowdown the gate would fail if the test could say it is real, with
  // too few repetitions for p < alpha whatever they are: not "same".
  if (slower && (!mw.ok() || SmallestP(b.size(), a.size()) >= o.alpha)) {
    char why[160];
    std::snprintf(why, sizeof(why),
                  "too few repetitions to decide: %zu vs %zu can reach p = "
                  "%.2g at best, the gate needs p < %g",
                  a.size(), b.size(), SmallestP(b.size(), a.size()), o.alpha);
    row.verdict = Verdict::kUndecided;
    row.note = why;
    return;
  }
  if (!mw.ok()) {
    row.note = mw.status().message();
    return;
  }
  if (row.p < o.alpha && row.ratio >= 1 + o.min_slowdown) {
    row.verdict = Verdict::kRegression;
  } else if (row.p < o.alpha && row.ratio <= 1 / (1 + o.min_slowdown)) {
    row.verdict = Verdict::kFaster;
  }
}

// Families whose measurement changed under the same benchmark names: the
// runs record the method in their context (an older run has no key: the
// method it used is `before`), and a benchmark measured one way in the base
// and another in the new run is not compared -- it is listed with the base's
// missing benchmarks, with the reason (--allow-missing accepts it).
struct MethodChange {
  std::string_view prefix;  // the families' common name prefix
  std::string_view key;     // context key
  std::string_view before;  // the method of runs without the key
};
constexpr MethodChange kMethodChanges[] = {
    // decode_paired/, decode_paired_kv/: from a56b8d7 one cold call per
    // round, before it calls for as long as the read pass had taken
    // (bench/README.md, "The paired figure").
    {"decode_paired", kDecodePairedMethodKey, "calls_for_the_read_pass"},
};

}  // namespace

std::string MethodMismatch(const std::string& name, const RunInfo& base,
                           const RunInfo& next) {
  for (const MethodChange& c : kMethodChanges) {
    if (name.rfind(c.prefix, 0) != 0) continue;
    const std::string a = ContextValue(base, c.key, c.before);
    const std::string b = ContextValue(next, c.key, c.before);
    if (a != b) {
      return "measured differently (" + std::string(c.key) + ": base " + a +
             ", new " + b + ")";
    }
  }
  return "";
}

CompareReport CompareRuns(const RunData& base, const RunData& next,
                          const CompareOptions& options) {
  CompareReport report;
  report.options = options;
  std::set<std::string> names;
  for (const auto& [n, s] : base.benchmarks) names.insert(n);
  for (const auto& [n, s] : next.benchmarks) names.insert(n);
  for (const std::string& name : names) {
    auto ib = base.benchmarks.find(name);
    auto in = next.benchmarks.find(name);
    CompareRow row;
    row.benchmark = name;
    row.ratio = NAN;
    if (in == next.benchmarks.end()) {
      row.metric = std::string(kTimeMetric);
      row.verdict = options.allow_missing ? Verdict::kGone : Verdict::kMissing;
      report.rows.push_back(row);
      continue;
    }
    if (ib != base.benchmarks.end()) ++report.compared;
    if (!in->second.error.empty()) {
      row.metric = "output";
      row.verdict = Verdict::kRegression;
      row.note = in->second.error;
      report.rows.push_back(row);
      continue;
    }
    if (ib == base.benchmarks.end() || !ib->second.error.empty()) {
      row.metric = std::string(kTimeMetric);
      row.verdict =
          ib == base.benchmarks.end() ? Verdict::kNew : Verdict::kFixed;
      if (const auto* b = FindMetric(in->second, kTimeMetric)) {
        row.new_value = Median(*b);
        row.n_new = b->size();
      }
      report.rows.push_back(row);
      continue;
    }
    if (std::string why = MethodMismatch(name, base.info, next.info);
        !why.empty()) {
      row.metric = std::string(kTimeMetric);
      row.verdict = options.allow_missing ? Verdict::kGone : Verdict::kMissing;
      row.note = std::move(why);
      report.rows.push_back(row);
      continue;
    }
    const auto* ta = FindMetric(ib->second, kTimeMetric);
    const auto* tb = FindMetric(in->second, kTimeMetric);
    if (ta != nullptr && tb != nullptr) {
      CompareTime(*ta, *tb, options, row);
      if (name.rfind("calibration/", 0) == 0 && row.verdict != Verdict::kSame) {
        row.verdict = Verdict::kHost;
        row.note = "host calibration: reported, not gated";
      }
      report.rows.push_back(row);
    } else if (ta != nullptr) {
      row.metric = std::string(kTimeMetric);
      row.old_value = Median(*ta);
      row.n_old = ta->size();
      row.verdict = options.allow_missing ? Verdict::kGone : Verdict::kMissing;
      report.rows.push_back(row);
    }
    for (std::string_view metric : kExactMetrics) {
      const auto* a = FindMetric(ib->second, metric);
      const auto* b = FindMetric(in->second, metric);
      if (a == nullptr && b == nullptr) continue;
      CompareRow e;
      e.benchmark = name;
      e.metric = std::string(metric);
      e.n_old = a != nullptr ? a->size() : 0;
      e.n_new = b != nullptr ? b->size() : 0;
      e.old_value = a != nullptr ? Max(*a) : 0;
      e.new_value = b != nullptr ? Max(*b) : 0;
      e.ratio = e.old_value != 0 ? e.new_value / e.old_value : NAN;
      const double slack = kExactSlack * std::max(1.0, std::fabs(e.old_value));
      if (a == nullptr) {
        e.verdict = Verdict::kNew;
      } else if (b == nullptr) {
        e.verdict = options.allow_missing ? Verdict::kGone : Verdict::kMissing;
      } else if (e.new_value > e.old_value + slack) {
        e.verdict = Verdict::kRegression;
        e.note = "exact gate: any increase fails";
      } else if (e.new_value < e.old_value - slack) {
        e.verdict = Verdict::kFaster;
      }
      report.rows.push_back(e);
    }
  }
  for (const CompareRow& r : report.rows) {
    if (r.verdict == Verdict::kRegression) ++report.regressions;
    if (r.verdict == Verdict::kUndecided) ++report.undecided;
    if (r.verdict == Verdict::kMissing) ++report.missing;
  }
  return report;
}

std::string FormatMetric(std::string_view metric, double v) {
  char buf[64];
  if (std::isnan(v)) return "-";
  if (metric == kTimeMetric || metric == "cpu_time_ns") {
    const char* unit = "ns";
    double x = v;
    if (x >= 1e9) {
      x /= 1e9;
      unit = "s";
    } else if (x >= 1e6) {
      x /= 1e6;
      unit = "ms";
    } else if (x >= 1e3) {
      x /= 1e3;
      unit = "us";
    }
    std::snprintf(buf, sizeof(buf), "%.4g %s", x, unit);
  } else if (metric.find("bytes") != std::string_view::npos && v >= 1e3) {
    const char* unit = "kB";
    double x = v / 1e3;
    if (x >= 1e6) {
      x /= 1e6;
      unit = "GB";
    } else if (x >= 1e3) {
      x /= 1e3;
      unit = "MB";
    }
    std::snprintf(buf, sizeof(buf), "%.4g %s", x, unit);
  } else {
    std::snprintf(buf, sizeof(buf), "%.4g", v);
  }
  return buf;
}

std::string FormatCompareTable(const CompareReport& report, const RunInfo& base,
                               const RunInfo& next) {
  auto describe = [](const RunInfo& r) {
    std::string s = (r.id > 0 ? "run " + std::to_string(r.id) + " " : "") +
                    TerminalSafe(r.sha.substr(0, 12)) +
                    (r.dirty ? "+dirty" : "") + " " + TerminalSafe(r.date) +
                    " on " + TerminalSafe(r.host);
    if (r.quick) s += " (quick)";
    return s;
  };
  std::string out =
      "base: " + describe(base) + "\nnew:  " + describe(next) + "\n";
  if (base.host != next.host) {
    out +=
        "warning: the runs come from different hosts; times are not "
        "comparable\n";
  }
  size_t w = 9;
  for (const CompareRow& r : report.rows) {
    w = std::max(w, TerminalSafe(r.benchmark).size());
  }
  char line[1024];
  std::snprintf(line, sizeof(line), "%-*s  %-21s %12s %12s %7s %9s  %s\n",
                static_cast<int>(w), "benchmark", "metric", "old", "new",
                "ratio", "p", "verdict");
  out += line;
  int same = 0, faster = 0;
  for (const CompareRow& r : report.rows) {
    char ratio[32] = "-", p[32] = "-";
    if (!std::isnan(r.ratio))
      std::snprintf(ratio, sizeof(ratio), "%.3f", r.ratio);
    if (r.p >= 0) std::snprintf(p, sizeof(p), "%.2g", r.p);
    const bool has_old = r.n_old > 0, has_new = r.n_new > 0;
    std::snprintf(line, sizeof(line), "%-*s  %-21s %12s %12s %7s %9s  %s",
                  static_cast<int>(w), TerminalSafe(r.benchmark).c_str(),
                  TerminalSafe(r.metric).c_str(),
                  has_old ? FormatMetric(r.metric, r.old_value).c_str() : "-",
                  has_new ? FormatMetric(r.metric, r.new_value).c_str() : "-",
                  ratio, p, std::string(VerdictName(r.verdict)).c_str());
    out += line;
    if (!r.note.empty()) out += "  (" + TerminalSafe(r.note) + ")";
    out += "\n";
    if (r.verdict == Verdict::kSame) ++same;
    if (r.verdict == Verdict::kFaster) ++faster;
  }
  std::snprintf(line, sizeof(line),
                "%d regressions, %d undecided, %d missing, %d faster, %d "
                "unchanged (gate: time p < %g and >= %g%% slower; allocs and "
                "bytes copied per step: any increase; a failed output check; "
                "a slowdown too few repetitions can decide; a benchmark "
                "missing from the new run)\n",
                report.regressions, report.undecided, report.missing, faster,
                same, report.options.alpha, 100 * report.options.min_slowdown);
  out += line;
  if (report.missing > 0) {
    std::set<std::string> names;
    for (const CompareRow& r : report.rows) {
      if (r.verdict == Verdict::kMissing) {
        names.insert(TerminalSafe(r.benchmark) +
                     (r.metric == kTimeMetric ? "" : " (" + r.metric + ")") +
                     (r.note.empty() ? "" : ": " + TerminalSafe(r.note)));
      }
    }
    out += "missing from the new run (--allow-missing accepts them):\n";
    for (const std::string& n : names) out += "  " + n + "\n";
  }
  if (report.compared == 0) {
    out +=
        "no benchmark is in both runs: nothing was compared (a filter that "
        "matched nothing, or the wrong run?)\n";
  }
  out += report.failed() ? "gate: FAILED\n" : "gate: passed\n";
  return out;
}

}  // namespace attnkit::bench
