#include "bench/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "bench/stats.h"
#include "runtime/stats.h"

namespace attnkit::bench {
namespace {

// Exact metrics travel through JSON text; a relative slack of 1e-9 absorbs
// printing round-trips and nothing else (one allocation more per step at
// 1e6 allocations is 1e-6).
constexpr double kExactSlack = 1e-9;

const std::vector<double>* Find(const BenchmarkSamples& s,
                                std::string_view metric) {
  auto it = s.metrics.find(std::string(metric));
  return it == s.metrics.end() || it->second.empty() ? nullptr : &it->second;
}

double Max(const std::vector<double>& v) {
  return *std::max_element(v.begin(), v.end());
}

void CompareTime(const std::vector<double>& a, const std::vector<double>& b,
                 const CompareOptions& o, CompareRow& row) {
  row.metric = std::string(kTimeMetric);
  row.old_value = Median(a);
  row.new_value = Median(b);
  row.n_old = a.size();
  row.n_new = b.size();
  row.ratio = row.old_value > 0 ? row.new_value / row.old_value : NAN;
  auto mw = MannWhitneyU(b, a);
  if (!mw.ok()) {
    row.note = mw.status().message();
    return;
  }
  row.p = mw->p;
  if (a.size() < 2 || b.size() < 2) {
    row.note = "too few repetitions to test";
    return;
  }
  if (row.p < o.alpha && row.ratio >= 1 + o.min_slowdown) {
    row.verdict = Verdict::kRegression;
  } else if (row.p < o.alpha && row.ratio <= 1 / (1 + o.min_slowdown)) {
    row.verdict = Verdict::kFaster;
  }
}

}  // namespace

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
      row.verdict = Verdict::kGone;
      report.rows.push_back(row);
      continue;
    }
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
      if (const auto* b = Find(in->second, kTimeMetric)) {
        row.new_value = Median(*b);
        row.n_new = b->size();
      }
      report.rows.push_back(row);
      continue;
    }
    const auto* ta = Find(ib->second, kTimeMetric);
    const auto* tb = Find(in->second, kTimeMetric);
    if (ta != nullptr && tb != nullptr) {
      CompareTime(*ta, *tb, options, row);
      if (name.rfind("calibration/", 0) == 0 && row.verdict != Verdict::kSame) {
        row.verdict = Verdict::kHost;
        row.note = "host calibration: reported, not gated";
      }
      report.rows.push_back(row);
    }
    for (std::string_view metric : kExactMetrics) {
      const auto* a = Find(ib->second, metric);
      const auto* b = Find(in->second, metric);
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
        e.verdict = Verdict::kGone;
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
                    r.sha.substr(0, 12) + (r.dirty ? "+dirty" : "") + " " +
                    r.date + " on " + r.host;
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
  for (const CompareRow& r : report.rows) w = std::max(w, r.benchmark.size());
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
                  static_cast<int>(w), r.benchmark.c_str(), r.metric.c_str(),
                  has_old ? FormatMetric(r.metric, r.old_value).c_str() : "-",
                  has_new ? FormatMetric(r.metric, r.new_value).c_str() : "-",
                  ratio, p, std::string(VerdictName(r.verdict)).c_str());
    out += line;
    if (!r.note.empty()) out += "  (" + r.note + ")";
    out += "\n";
    if (r.verdict == Verdict::kSame) ++same;
    if (r.verdict == Verdict::kFaster) ++faster;
  }
  std::snprintf(line, sizeof(line),
                "%d regressions, %d faster, %d unchanged (gate: time p < %g "
                "and >= %g%% slower; allocs and bytes copied per step: any "
                "increase; a failed output check)\n",
                report.regressions, faster, same, report.options.alpha,
                100 * report.options.min_slowdown);
  out += line;
  return out;
}

}  // namespace attnkit::bench
