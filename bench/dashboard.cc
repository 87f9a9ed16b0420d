#include "bench/dashboard.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string_view>

#include "bench/decode_bandwidth.h"
#include "bench/prefill_paired.h"
#include "runtime/stats.h"

namespace attnkit::bench {
namespace {

// HTML text and attribute values (runtime/text.h).
std::string Escape(std::string_view raw) { return MarkupEscape(raw); }

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

std::string ShortSha(const RunInfo& r) {
  return r.sha.substr(0, 8) + (r.dirty ? "+" : "");
}

// The metrics plotted for a benchmark, in order, and their axis titles.
struct PlotSpec {
  std::string metric;
  std::string title;
};
std::vector<PlotSpec> PlotsFor(const std::set<std::string>& metrics) {
  std::vector<PlotSpec> specs = {
      {std::string(kTimeMetric), "time / iteration"}};
  for (const PlotSpec& s : std::vector<PlotSpec>{
           {"GFLOPS", "GFLOPS"},
           {"GBps", "GB/s"},
           {"pct_peak", "% of start-of-run calibration"},
           {std::string(kPctReadBwPaired), "% of the paired read passes"},
           {std::string(kPctFmaPaired), "% of the paired FMA loops"},
           {"allocs_per_step", "allocations / step"},
           {"bytes_copied_per_step", "bytes copied / step"},
           {"first_over_warm", "first call / warmed call"}}) {
    if (metrics.count(s.metric) != 0) specs.push_back(s);
  }
  return specs;
}

// One plot point: a run's median and the min..max of its repetitions.
struct Point {
  size_t run;
  double median, lo, hi;
};

std::vector<Point> MetricPoints(const std::vector<RunData>& runs,
                                const std::string& bench,
                                const std::string& metric) {
  std::vector<Point> pts;
  for (size_t i = 0; i < runs.size(); ++i) {
    auto b = runs[i].benchmarks.find(bench);
    if (b == runs[i].benchmarks.end()) continue;
    const std::vector<double>* m = FindMetric(b->second, metric);
    if (m == nullptr) continue;
    const auto [lo, hi] = std::minmax_element(m->begin(), m->end());
    pts.push_back({i, Median(*m), *lo, *hi});
  }
  return pts;
}

// One small line plot: per run the median (polyline vertex, circle) and the
// min..max of the repetitions (whisker).
std::string Plot(const std::vector<RunData>& runs,
                 const std::vector<Point>& pts, const PlotSpec& spec,
                 const std::vector<bool>& flagged) {
  constexpr double kW = 300, kH = 140, kLeft = 58, kRight = 8, kTop = 18,
                   kBottom = 26;
  std::string svg = "<svg class=\"plot\" data-metric=\"" + Escape(spec.metric) +
                    "\" width=\"" + Num(kW) + "\" height=\"" + Num(kH) +
                    "\" viewBox=\"0 0 " + Num(kW) + " " + Num(kH) +
                    "\" role=\"img\">";
  svg += "<text class=\"ptitle\" x=\"" + Num(kLeft) + "\" y=\"12\">" +
         Escape(spec.title) + "</text>";
  if (pts.empty()) return svg + "</svg>";
  double lo = pts[0].lo, hi = pts[0].hi;
  for (const Point& p : pts) {
    lo = std::min(lo, p.lo);
    hi = std::max(hi, p.hi);
  }
  // Start rates and counts at zero so a drop reads as its true size; pad a
  // flat series so it still has a height.
  if (spec.metric != kTimeMetric && lo > 0) lo = 0;
  if (hi - lo <= 1e-12 * std::max(1.0, std::fabs(hi))) {
    hi += std::max(1.0, std::fabs(hi)) * 0.05;
    lo -= std::max(1.0, std::fabs(lo)) * 0.05;
  }
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  const size_t n = runs.size();
  auto x = [&](size_t run) {
    return kLeft + (n <= 1 ? pw / 2
                           : pw * static_cast<double>(run) /
                                 static_cast<double>(n - 1));
  };
  auto y = [&](double v) { return kTop + ph * (1 - (v - lo) / (hi - lo)); };
  svg += "<line class=\"axis\" x1=\"" + Num(kLeft) + "\" y1=\"" + Num(kTop) +
         "\" x2=\"" + Num(kLeft) + "\" y2=\"" + Num(kTop + ph) + "\"/>";
  svg += "<line class=\"axis\" x1=\"" + Num(kLeft) + "\" y1=\"" +
         Num(kTop + ph) + "\" x2=\"" + Num(kLeft + pw) + "\" y2=\"" +
         Num(kTop + ph) + "\"/>";
  for (double v : {lo, hi}) {
    svg += "<text class=\"tick\" x=\"" + Num(kLeft - 4) + "\" y=\"" +
           Num(y(v) + 4) + "\" text-anchor=\"end\">" +
           Escape(FormatMetric(spec.metric, v)) + "</text>";
  }
  svg += "<text class=\"tick\" x=\"" + Num(kLeft) + "\" y=\"" + Num(kH - 8) +
         "\">" + Escape(ShortSha(runs[pts.front().run].info)) + "</text>";
  if (pts.size() > 1) {
    svg += "<text class=\"tick\" x=\"" + Num(kLeft + pw) + "\" y=\"" +
           Num(kH - 8) + "\" text-anchor=\"end\">" +
           Escape(ShortSha(runs[pts.back().run].info)) + "</text>";
  }
  std::string poly;
  for (const Point& p : pts) {
    poly += (poly.empty() ? "" : " ") + Num(x(p.run)) + "," + Num(y(p.median));
    svg += "<line class=\"whisker\" x1=\"" + Num(x(p.run)) + "\" y1=\"" +
           Num(y(p.lo)) + "\" x2=\"" + Num(x(p.run)) + "\" y2=\"" +
           Num(y(p.hi)) + "\"/>";
  }
  svg += "<polyline class=\"series\" points=\"" + poly + "\"/>";
  for (const Point& p : pts) {
    const bool bad = flagged[p.run];
    svg += "<circle class=\"" + std::string(bad ? "pt regression" : "pt") +
           "\" cx=\"" + Num(x(p.run)) + "\" cy=\"" + Num(y(p.median)) +
           "\" r=\"" + (bad ? "5" : "2.5") + "\"><title>" +
           Escape(ShortSha(runs[p.run].info) + " " + runs[p.run].info.date +
                  ": " + FormatMetric(spec.metric, p.median) +
                  (bad ? " (regression vs previous run)" : "")) +
           "</title></circle>";
  }
  return svg + "</svg>";
}

constexpr const char* kStyle = R"css(
body{font:14px system-ui,sans-serif;margin:24px;color:#222}
h1{font-size:22px}h2{font-size:18px;margin-top:28px}h3{font-size:13px;margin:4px 0;font-family:monospace}
table{border-collapse:collapse;font-size:12px}td,th{padding:2px 8px;border-bottom:1px solid #ddd;text-align:right}
td:first-child,th:first-child,td.m,th.m{text-align:left;font-family:monospace}
tr.regression td{background:#fde2e2;color:#900;font-weight:600}tr.faster td{background:#e3f6e3}tr.unknown td{background:#fff1c2;color:#740}
.bench{display:inline-block;vertical-align:top;margin:6px 12px 10px 0;padding:4px;border:1px solid #eee}
.bench.flagged{border-color:#d33}
svg.plot{background:#fafafa;margin-right:4px}
.axis{stroke:#888;stroke-width:1}.whisker{stroke:#9ab;stroke-width:3;opacity:.6}
.series{fill:none;stroke:#1f6fb2;stroke-width:1.8}.pt{fill:#1f6fb2}
.pt.regression{fill:#d62728;stroke:#600;stroke-width:1}
.tick{font-size:9px;fill:#555}.ptitle{font-size:11px;fill:#222}
#status{color:#666;font-size:12px}
.missing{color:#900}
)css";

// Filters benchmarks by a regular expression, and reports how many plots the
// browser actually laid out (a series with a non-empty bounding box): the
// rendering test reads data-plots-drawn from the DOM.
constexpr const char* kScript = R"js(
(function(){
  var plots=document.querySelectorAll('svg.plot'),drawn=0;
  plots.forEach(function(p){var s=p.querySelector('polyline.series');
    if(!s)return;var b=s.getBBox(),r=p.getBoundingClientRect();
    if(r.width>0&&r.height>0&&(b.width>0||b.height>0||s.points.numberOfItems==1))drawn++;});
  document.body.setAttribute('data-plots-total',plots.length);
  document.body.setAttribute('data-plots-drawn',drawn);
  document.getElementById('status').textContent=drawn+' of '+plots.length+' plots drawn';
  var f=document.getElementById('filter');
  f.addEventListener('input',function(){var re;try{re=new RegExp(f.value)}catch(e){return}
    document.querySelectorAll('.bench').forEach(function(b){
      b.style.display=re.test(b.getAttribute('data-name'))?'':'none';});});
})();
)js";

}  // namespace

std::string RenderDashboard(const std::vector<RunData>& runs,
                            const CompareOptions& options) {
  std::string h =
      "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<title>attnkit benchmarks</title><style>" +
      std::string(kStyle) +
      "</style></head>\n<body>\n<h1>attnkit benchmark "
      "history</h1>\n";
  if (runs.empty()) {
    return h +
           "<p>The history store holds no runs yet: run <code>./attnkit "
           "bench</code>.</p><p id=\"status\"></p><input id=\"filter\" "
           "hidden><script>" +
           std::string(kScript) + "</script></body></html>\n";
  }
  const RunInfo& last = runs.back().info;
  h += "<p>" + std::to_string(runs.size()) + " runs on host <b>" +
       Escape(last.host) + "</b>, " + Escape(runs.front().info.date) + " to " +
       Escape(last.date) +
       ". Points are medians over repetitions, bars span min..max; red points "
       "fail the gate against the previous run (Mann-Whitney p &lt; " +
       Escape(FormatMetric("", options.alpha)) + " and &ge; " +
       Escape(FormatMetric("", 100 * options.min_slowdown)) +
       "% slower, or more allocations / bytes copied per step, or a failed "
       "output check).</p>\n";

  // Gate verdicts of each run against its predecessor: per benchmark and
  // run, the metrics that failed ("output" for a failed check).
  std::vector<CompareReport> reports(runs.size());
  std::map<std::string, std::vector<std::set<std::string>>> flagged;
  for (size_t i = 1; i < runs.size(); ++i) {
    reports[i] = CompareRuns(runs[i - 1], runs[i], options);
    for (const CompareRow& r : reports[i].rows) {
      if (r.verdict != Verdict::kRegression) continue;
      auto& f = flagged[r.benchmark];
      f.resize(runs.size());
      f[i].insert(r.metric);
    }
  }

  // Latest vs previous.
  h += "<h2>Latest run vs previous</h2>\n";
  if (runs.size() < 2) {
    h += "<p>Only one run so far.</p>\n";
  } else {
    const CompareReport& rep = reports.back();
    const RunInfo& prev = runs[runs.size() - 2].info;
    h += "<p>" + Escape(ShortSha(prev)) + " (" + Escape(prev.date) +
         ") &rarr; " + Escape(ShortSha(last)) + " (" + Escape(last.date) +
         "): <b>" + std::to_string(rep.regressions) + " regressions</b>" +
         (rep.undecided + rep.missing > 0
              ? ", <b>" + std::to_string(rep.undecided) +
                    " undecided</b> (too few repetitions), <b>" +
                    std::to_string(rep.missing) + " missing</b>"
              : std::string()) +
         "</p>\n";
    h += "<table id=\"latest\"><tr><th>benchmark</th><th "
         "class=\"m\">metric</th><th>old"
         "</th><th>new</th><th>ratio</th><th>p</th><th>verdict</th></tr>\n";
    for (const CompareRow& r : rep.rows) {
      const char* cls =
          r.verdict == Verdict::kRegression ? "regression"
          : r.verdict == Verdict::kUndecided || r.verdict == Verdict::kMissing
              ? "unknown"
          : r.verdict == Verdict::kFaster ? "faster"
                                          : "";
      char ratio[32] = "-", p[32] = "-";
      if (!std::isnan(r.ratio))
        std::snprintf(ratio, sizeof(ratio), "%.3f", r.ratio);
      if (r.p >= 0) std::snprintf(p, sizeof(p), "%.2g", r.p);
      h += std::string("<tr class=\"") + cls + "\"><td>" + Escape(r.benchmark) +
           "</td><td class=\"m\">" + Escape(r.metric) + "</td><td>" +
           (r.n_old ? Escape(FormatMetric(r.metric, r.old_value)) : "-") +
           "</td><td>" +
           (r.n_new ? Escape(FormatMetric(r.metric, r.new_value)) : "-") +
           "</td><td>" + ratio + "</td><td>" + p + "</td><td>" +
           Escape(std::string(VerdictName(r.verdict)) +
                  (r.note.empty() ? "" : ": " + r.note)) +
           "</td></tr>\n";
    }
    h += "</table>\n";
  }

  // Decode against the read bandwidth measured in the same run: the figure
  // to quote (see decode_bandwidth.h for why not pct_peak).
  std::vector<std::map<std::string, double>> same_run_pct(runs.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    same_run_pct[i] = PctReadBwSameRun(runs[i]);
  }
  const DecodeBandwidthReport bw = DecodeVsReadBandwidth(runs.back());
  h += "<h2>Decode vs the read bandwidth of the same run (latest run)</h2>\n"
       "<p><code>pct_read_bw_same_run</code> = 100 &times; median decode GB/s "
       "/ median GB/s of <code>calibration/read_bw</code> at the decode "
       "thread count, both from the same run (repetitions interleaved, so "
       "both sample the same tenant load). <code>pct_peak</code> divides by "
       "the one-off calibration taken at the start of the run; this host's "
       "read bandwidth swings between 26 and 71 GB/s within minutes, so that "
       "can be off by 1.5x. <code>pct_read_bw_paired</code> comes from the "
       "<code>decode_paired/</code> twin: per round, decode GB/s over the "
       "GB/s of a read pass run just before it, the median over rounds "
       "&mdash; the tighter figure.</p>\n";
  if (bw.read_bw.ok()) {
    h += "<p id=\"read-bw\">" + Escape(ShortSha(last)) + ": <code>" +
         Escape(bw.read_bw->benchmark) + "</code> median <b>" +
         Escape(FormatMetric("", bw.read_bw->median_gbps)) + " GB/s</b> over " +
         std::to_string(bw.read_bw->repetitions) + " repetitions (" +
         Escape(FormatMetric("", bw.read_bw->min_gbps)) + ".." +
         Escape(FormatMetric("", bw.read_bw->max_gbps)) +
         "); start-of-run calibration " +
         (std::isnan(bw.calib_read_gbps_start)
              ? std::string("not recorded")
              : FormatMetric("", bw.calib_read_gbps_start) + " GB/s") +
         (bw.read_bw->note.empty() ? ""
                                   : " (" + Escape(bw.read_bw->note) + ")") +
         ".</p>\n";
  } else {
    h += "<p id=\"read-bw\" class=\"missing\">" + Escape(ShortSha(last)) +
         ": no <code>pct_read_bw_same_run</code>: " +
         Escape(bw.read_bw.status().message()) + ".</p>\n";
  }
  if (!bw.warning.empty()) {
    h += "<p class=\"missing\">Warning: " + Escape(bw.warning) + ".</p>\n";
  }
  if (bw.rows.empty()) {
    h += "<p>The latest run has no decode benchmarks.</p>\n";
  } else {
    h += "<table id=\"decode-bw\"><tr><th>benchmark</th><th>reps</th>"
         "<th>median GB/s</th><th>pct_peak (start of run)</th>"
         "<th>pct_read_bw_same_run</th><th>pct_read_bw_paired</th></tr>\n";
    for (const DecodeBandwidthRow& r : bw.rows) {
      auto cell = [](double v) {
        return std::isnan(v) ? std::string("n/a") : FormatMetric("", v);
      };
      h += "<tr><td>" + Escape(r.benchmark) + "</td>";
      if (!r.error.empty()) {
        h += "<td colspan=\"5\">failed: " + Escape(r.error) + "</td></tr>\n";
        continue;
      }
      h += "<td>" + std::to_string(r.repetitions) + "</td><td>" +
           cell(r.median_gbps) + "</td><td>" + cell(r.pct_peak_start) +
           "</td><td>" + cell(r.pct_read_bw_same_run) + "</td><td>" +
           cell(r.pct_read_bw_paired) + "</td></tr>\n";
    }
    h += "</table>\n";
  }

  // Benchmarks grouped by suite (the name's first component).
  std::map<std::string, std::map<std::string, std::set<std::string>>> suites;
  for (const RunData& r : runs) {
    for (const auto& [name, s] : r.benchmarks) {
      const std::string suite = name.substr(0, name.find('/'));
      auto& metrics = suites[suite][name];
      for (const auto& [m, v] : s.metrics) metrics.insert(m);
    }
  }
  h += "<h2>History</h2>\n<p>Filter (regular expression): <input id=\"filter\" "
       "size=\"50\" placeholder=\"e.g. decode_step|S:2048\"> <span "
       "id=\"status\"></span></p>\n";
  for (const auto& [suite, benches] : suites) {
    h += "<h2>" + Escape(suite) + "</h2>\n";
    for (const auto& [name, metrics] : benches) {
      auto f = flagged.find(name);
      const bool any = f != flagged.end();
      h += "<div class=\"bench" + std::string(any ? " flagged" : "") +
           "\" data-name=\"" + Escape(name) + "\"><h3>" + Escape(name) +
           "</h3>";
      // A plot marks the runs where its own metric failed, where the time
      // failed (rates are derived from it), or where the output did.
      auto marks = [&](const std::string& metric) {
        std::vector<bool> v(runs.size(), false);
        for (size_t i = 0; any && i < runs.size(); ++i) {
          const std::set<std::string>& m = f->second[i];
          v[i] = m.count(metric) != 0 || m.count("output") != 0 ||
                 (m.count(std::string(kTimeMetric)) != 0 &&
                  !IsExactMetric(metric));
        }
        return v;
      };
      for (const PlotSpec& spec : PlotsFor(metrics)) {
        h += Plot(runs, MetricPoints(runs, name, spec.metric), spec,
                  marks(spec.metric));
      }
      // The same-run ratio is one number per run (a ratio of two medians),
      // so its points carry no whisker.
      std::vector<Point> same_run;
      for (size_t i = 0; i < runs.size(); ++i) {
        auto r = same_run_pct[i].find(name);
        if (r != same_run_pct[i].end()) {
          same_run.push_back({i, r->second, r->second, r->second});
        }
      }
      if (!same_run.empty()) {
        const PlotSpec spec{std::string(kPctReadBwSameRun),
                            "% of same-run read bandwidth"};
        h += Plot(runs, same_run, spec, marks(spec.metric));
      }
      h += "</div>\n";
    }
  }
  h += "<script>" + std::string(kScript) + "</script>\n</body></html>\n";
  return h;
}

}  // namespace attnkit::bench
