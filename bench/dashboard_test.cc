#include "bench/dashboard.h"

#include <gtest/gtest.h>

#include <regex>

#include "bench/testing_runs.h"

namespace attnkit::bench {
namespace {

constexpr const char* kPrefill =
    "prefill/reference/S:2048/d:128/causal:1/hkv:8/real_time";

size_t Count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos;
       at = s.find(what, at + 1)) {
    ++n;
  }
  return n;
}

// The <div class="bench..."> of one benchmark.
std::string BenchDiv(const std::string& html, const std::string& name) {
  const size_t name_at = html.find("data-name=\"" + name + "\"");
  if (name_at == std::string::npos) return "";
  const size_t at = html.rfind("<div", name_at);
  return html.substr(at, html.find("</div>", at) - at);
}

std::vector<RunData> History(const testing::Plant& last_plant) {
  return {testing::SyntheticRun("1111aaaa", "2026-01-01", 1),
          testing::SyntheticRun("2222bbbb", "2026-01-02", 2),
          testing::SyntheticRun("3333cccc", "2026-01-03", 3),
          testing::SyntheticRun("4444dddd", "2026-01-04", 4, 9, last_plant)};
}

TEST(DashboardTest, PlotsEveryMetricAcrossRuns) {
  const std::string html = RenderDashboard(History({}));
  // One plot per (benchmark, metric): time + GFLOPS everywhere, plus allocs
  // and bytes copied for the two decode_step benchmarks.
  const size_t benches = std::size(testing::kSyntheticBenchmarks);
  EXPECT_EQ(Count(html, "<svg class=\"plot\""), 2 * benches + 2 * 2);
  EXPECT_EQ(Count(html, "<polyline class=\"series\""), 2 * benches + 4);
  // Each series has one vertex per run.
  const std::regex poly("<polyline class=\"series\" points=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), poly);
       it != std::sregex_iterator(); ++it) {
    const std::string pts = (*it)[1];
    EXPECT_EQ(Count(pts, ","), 4u) << pts;
  }
  EXPECT_EQ(Count(html, "pt regression"), 0u);
  EXPECT_NE(html.find("0 regressions"), std::string::npos);
  EXPECT_NE(html.find("4444dddd"), std::string::npos);
  // Self-contained: no external fetches.
  EXPECT_EQ(html.find("http://"), std::string::npos);
  EXPECT_EQ(html.find("https://"), std::string::npos);
  EXPECT_EQ(html.find(" src="), std::string::npos);
}

TEST(DashboardTest, PairedPrefillGetsAPlotOfItsFigure) {
  std::vector<RunData> runs = History({});
  const std::string name =
      "prefill_paired/simd/S:2048/d:128/causal:1/hkv:8/iterations:4/"
      "manual_time";
  for (size_t i = 0; i < runs.size(); ++i) {
    BenchmarkSamples& b = runs[i].benchmarks[name];
    b.metrics["GFLOPS"] = {250.0 + static_cast<double>(i)};
    b.metrics["pct_fma_paired"] = {75, 77.0 + static_cast<double>(i), 80};
  }
  const std::string div = BenchDiv(RenderDashboard(runs), name);
  EXPECT_NE(div.find("data-metric=\"pct_fma_paired\""), std::string::npos)
      << div;
  EXPECT_NE(div.find("% of the paired FMA loops"), std::string::npos) << div;
}

TEST(DashboardTest, MarksPlantedRegressionsInPlotsAndTable) {
  testing::Plant plant;
  plant.slowdown[kPrefill] = 1.25;
  plant.extra_alloc["decode_step/reference/len:512/inplace:1/real_time"] = 3;
  const std::string html = RenderDashboard(History(plant));
  // The slowed benchmark: a red point in each of its two plots.
  const std::string prefill = BenchDiv(html, kPrefill);
  ASSERT_FALSE(prefill.empty());
  EXPECT_EQ(Count(prefill, "pt regression"), 2u);
  EXPECT_NE(prefill.find("class=\"bench flagged\""), std::string::npos);
  // The allocation: a red point in the allocations plot only.
  const std::string step =
      BenchDiv(html, "decode_step/reference/len:512/inplace:1/real_time");
  EXPECT_EQ(Count(step, "pt regression"), 1u);
  const size_t allocs_plot = step.find("data-metric=\"allocs_per_step\"");
  ASSERT_NE(allocs_plot, std::string::npos);
  EXPECT_GT(step.find("pt regression"), allocs_plot);
  EXPECT_LT(step.find("pt regression"),
            step.find("data-metric=\"bytes_copied_per_step\""));
  // Nothing else is marked.
  EXPECT_EQ(Count(html, "pt regression"), 3u);
  // The latest-vs-previous table names both.
  EXPECT_NE(html.find("<b>2 regressions</b>"), std::string::npos);
  EXPECT_EQ(Count(html, "<tr class=\"regression\">"), 2u);
}

// Each run's decode figure divides by that run's own read_bw median at the
// decode thread count; a run without read_bw gets no point and says why.
TEST(DashboardTest, DecodeAgainstEachRunsOwnReadBandwidth) {
  std::vector<RunData> runs = History({});
  const double read_bw[] = {40, 20, 80, 0};  // 0: filtered out of run 4
  for (size_t i = 0; i < runs.size(); ++i) {
    testing::SetBandwidthContext(runs[i], 2, 52);
    testing::SetDecodeBandwidth(runs[i], testing::kSyntheticDecode,
                                {8, 9, 10, 19, 20}, 52);
    if (read_bw[i] == 0) continue;
    // Skewed repetitions (mean != median) and a 1-thread instance that must
    // not be the divisor.
    testing::AddReadBandwidth(runs[i], 2,
                              {read_bw[i], 0.7 * read_bw[i], 1.7 * read_bw[i]});
    testing::AddReadBandwidth(runs[i], 1, {5, 5, 5});
  }
  std::string html = RenderDashboard(runs);
  const std::string decode = BenchDiv(html, testing::kSyntheticDecode);
  const size_t plot = decode.find("data-metric=\"pct_read_bw_same_run\"");
  ASSERT_NE(plot, std::string::npos) << decode;
  const std::string svg =
      decode.substr(plot, decode.find("</svg>", plot) - plot);
  EXPECT_NE(svg.find("2026-01-01: 25</title>"), std::string::npos) << svg;
  EXPECT_NE(svg.find("2026-01-02: 50</title>"), std::string::npos) << svg;
  EXPECT_NE(svg.find("2026-01-03: 12.5</title>"), std::string::npos) << svg;
  EXPECT_EQ(svg.find("2026-01-04"), std::string::npos) << svg;
  // The start-of-run figure stays, under its own name.
  EXPECT_NE(decode.find("% of start-of-run calibration"), std::string::npos);
  // The latest run has no read_bw: the table says so, with no number.
  EXPECT_NE(html.find("no <code>pct_read_bw_same_run</code>: the run has no "
                      "calibration/read_bw benchmark (filtered out?)"),
            std::string::npos);
  const size_t table = html.find("<table id=\"decode-bw\">");
  ASSERT_NE(table, std::string::npos);
  EXPECT_NE(
      html.find("<td>10</td><td>19.23</td><td>n/a</td><td>n/a</td>", table),
      std::string::npos)
      << html.substr(table, 600);

  // With read_bw in the latest run the table shows its ratio, not another
  // run's: 100 * 10 / 32.
  testing::AddReadBandwidth(runs[3], 2, {32, 31, 60});
  html = RenderDashboard(runs);
  EXPECT_NE(html.find("<td>10</td><td>19.23</td><td>31.25</td><td>n/a</td>"),
            std::string::npos);
  // A decode_paired/ twin adds the paired figure to the same row.
  BenchmarkSamples& twin =
      runs[3].benchmarks
          ["decode_paired/reference/kv_len:4096/bf16:0/batch:1/"
           "iterations:32/manual_time"];
  twin.metrics["GBps"] = {11, 12, 13};
  twin.metrics["pct_read_bw_paired"] = {70, 90, 80};
  html = RenderDashboard(runs);
  EXPECT_NE(
      html.find("<td>10</td><td>19.23</td><td>31.25</td><td>80</td></tr>"),
      std::string::npos);
  // ... and the twin's history gets a plot of its own figure.
  const std::string paired = BenchDiv(
      html,
      "decode_paired/reference/kv_len:4096/bf16:0/batch:1/iterations:32/"
      "manual_time");
  EXPECT_NE(paired.find("data-metric=\"pct_read_bw_paired\""),
            std::string::npos)
      << paired;
  EXPECT_NE(html.find("calibration/read_bw/threads:2/real_time</code> median "
                      "<b>32 GB/s</b> over 3 repetitions (31..60)"),
            std::string::npos);
  EXPECT_EQ(html.find("did not interleave"), std::string::npos);
  testing::SetBandwidthContext(runs[3], 2, 52, /*interleaved=*/false);
  EXPECT_NE(RenderDashboard(runs).find("Warning: this run did not interleave"),
            std::string::npos);
}

TEST(DashboardTest, EscapesNamesAndHandlesEmptyAndSingleRun) {
  RunData r = testing::SyntheticRun("<script>", "2026-01-01", 1);
  r.benchmarks["weird/<b>&\"x\""] = r.benchmarks.begin()->second;
  const std::string html = RenderDashboard({r});
  EXPECT_EQ(Count(html, "<script>"), 1u);  // ours only; the sha is escaped
  EXPECT_NE(html.find("&lt;script&gt;"), std::string::npos);
  EXPECT_NE(html.find("weird/&lt;b&gt;&amp;&quot;x&quot;"), std::string::npos);
  EXPECT_EQ(html.find("<b>&"), std::string::npos);
  EXPECT_NE(html.find("Only one run so far"), std::string::npos);
  const std::string empty = RenderDashboard({});
  EXPECT_NE(empty.find("no runs yet"), std::string::npos);
}

// Control characters (which HTML forbids) and quotes in names and run
// fields: shown as the terminal shows them, "\x1b", and HTML-escaped.
TEST(DashboardTest, EscapesControlCharactersAndQuotes) {
  RunData a = testing::SyntheticRun("aaaa", "2026-01-01", 1);
  RunData b = testing::SyntheticRun("bbbb", "2026-01-02", 2);
  const std::string evil = "evil\x1b[2J'<i>\x07\xc2\x9b/real_time";
  a.benchmarks[evil] = a.benchmarks.begin()->second;
  b.benchmarks[evil] = a.benchmarks[evil];
  b.info.host = a.info.host;
  b.info.date = "2026\x1b[31m";
  const std::string html = RenderDashboard({a, b});
  EXPECT_EQ(html.find('\x1b'), std::string::npos);
  EXPECT_EQ(html.find('\x07'), std::string::npos);
  EXPECT_EQ(html.find("\xc2\x9b"), std::string::npos);
  EXPECT_EQ(html.find("<i>"), std::string::npos);
  EXPECT_NE(html.find("evil\\x1b[2J&#39;&lt;i&gt;\\x07\\u009b/real_time"),
            std::string::npos);
  EXPECT_NE(html.find("2026\\x1b[31m"), std::string::npos);
}

}  // namespace
}  // namespace attnkit::bench
