#include "bench/decode_bandwidth.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "runtime/stats.h"

namespace attnkit::bench {
namespace {

constexpr std::string_view kGbps = "GBps";

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// N of a "/threads:N" component, or -1.
int ThreadsOf(std::string_view name) {
  size_t at = 0;
  while ((at = name.find("/threads:", at)) != std::string_view::npos) {
    at += 9;
    const size_t end = name.find('/', at);
    const std::string n(name.substr(
        at, end == std::string_view::npos ? std::string_view::npos : end - at));
    char* stop = nullptr;
    const long v = std::strtol(n.c_str(), &stop, 10);
    if (!n.empty() && *stop == '\0' && v > 0) return static_cast<int>(v);
  }
  return -1;
}

// A positive integer out of a context string, or -1.
int ParseCount(const std::string& text) {
  char* stop = nullptr;
  const long v = std::strtol(text.c_str(), &stop, 10);
  return !text.empty() && *stop == '\0' && v > 0 ? static_cast<int>(v) : -1;
}

// Decode families and their paired twins: decode/ and decode_paired/, and
// the KV-storage grid decode_kv/ and decode_paired_kv/ (f32, bf16, i8).
bool IsDecode(std::string_view name) {
  return StartsWith(name, "decode/") || StartsWith(name, "decode_kv/");
}
bool IsPairedDecode(std::string_view name) {
  return StartsWith(name, "decode_paired/") ||
         StartsWith(name, "decode_paired_kv/");
}

}  // namespace

StatusOr<ReadBandwidth> SameRunReadBandwidth(const RunData& run) {
  std::vector<std::pair<const std::string*, int>> candidates;
  for (const auto& [name, s] : run.benchmarks) {
    if (StartsWith(name, kReadBwPrefix)) {
      candidates.emplace_back(&name, ThreadsOf(name));
    }
  }
  if (candidates.empty()) {
    return Status::NotFound(
        "the run has no calibration/read_bw benchmark (filtered out?), so "
        "there is no same-run read bandwidth to divide by");
  }
  const std::string omp = ContextValue(run.info, "omp_threads", "");
  const int want = ParseCount(omp);
  const std::string* chosen = nullptr;
  int threads = 0;
  std::string note;
  if (want > 0) {
    for (const auto& [name, t] : candidates) {
      if (t == want) {
        chosen = name;
        threads = t;
      }
    }
    if (chosen == nullptr) {
      std::string have;
      for (const auto& [name, t] : candidates) {
        have += (have.empty() ? "" : ", ") + *name;
      }
      return Status::NotFound(
          "the run has no calibration/read_bw/threads:" + std::to_string(want) +
          " (the decode benchmarks' thread count, context omp_threads=" + omp +
          "); it has " + have);
    }
  } else {
    // Runs without omp_threads in their context (hand-written or older
    // JSON): decode runs on every thread, which is the largest count the
    // benchmark was registered with.
    for (const auto& [name, t] : candidates) {
      if (chosen == nullptr || t > threads) {
        chosen = name;
        threads = t;
      }
    }
    note = "context has no omp_threads; took the largest thread count";
  }
  const BenchmarkSamples& s = run.benchmarks.at(*chosen);
  if (!s.error.empty()) {
    return Status::FailedPrecondition(*chosen + " failed: " + s.error);
  }
  const std::vector<double>* g = FindMetric(s, kGbps);
  if (g == nullptr) {
    return Status::FailedPrecondition(*chosen + " reports no GBps");
  }
  ReadBandwidth bw;
  bw.benchmark = *chosen;
  bw.threads = threads;
  bw.median_gbps = Median(*g);
  const auto [lo, hi] = std::minmax_element(g->begin(), g->end());
  bw.min_gbps = *lo;
  bw.max_gbps = *hi;
  bw.repetitions = g->size();
  bw.note = note;
  if (!(bw.median_gbps > 0)) {
    return Status::FailedPrecondition(
        *chosen + ": median GBps=" + FixedOrNa(bw.median_gbps, 3) +
        " is not positive");
  }
  return bw;
}

DecodeBandwidthReport DecodeVsReadBandwidth(const RunData& run) {
  DecodeBandwidthReport report;
  report.read_bw = SameRunReadBandwidth(run);
  const std::string start = ContextValue(run.info, "calib_read_gbps_all", "");
  char* stop = nullptr;
  report.calib_read_gbps_start = std::strtod(start.c_str(), &stop);
  if (start.empty() || *stop != '\0' || !(report.calib_read_gbps_start > 0)) {
    report.calib_read_gbps_start = NAN;
  }
  if (ContextValue(run.info, "random_interleaving", "") == "0") {
    report.warning =
        "this run did not interleave repetitions: read_bw's ran back to back, "
        "so it sampled seconds of the host's load, not the decode "
        "benchmarks' (run with --benchmark_enable_random_interleaving=true, "
        "as ./attnkit bench does)";
  }
  // A row from a benchmark's samples, or false for one that is no bandwidth
  // benchmark.
  auto make_row = [&](const std::string& name, const BenchmarkSamples& s,
                      DecodeBandwidthRow& row) {
    row.benchmark = name;
    row.error = s.error;
    row.median_gbps = row.pct_peak_start = row.pct_read_bw_same_run =
        row.pct_read_bw_paired = NAN;
    if (const auto* g = FindMetric(s, kGbps)) {
      row.repetitions = g->size();
      row.median_gbps = Median(*g);
    } else if (s.error.empty()) {
      return false;
    }
    row.pct_peak_start = MedianMetric(s, "pct_peak");
    if (report.read_bw.ok() && !std::isnan(row.median_gbps)) {
      row.pct_read_bw_same_run =
          100.0 * row.median_gbps / report.read_bw->median_gbps;
    }
    return true;
  };
  std::map<std::string, size_t> by_shape;
  for (const auto& [name, s] : run.benchmarks) {
    if (!IsDecode(name)) continue;
    DecodeBandwidthRow row;
    if (!make_row(name, s, row)) continue;
    by_shape[TwinShape(name)] = report.rows.size();
    report.rows.push_back(std::move(row));
  }
  for (const auto& [name, s] : run.benchmarks) {
    if (!IsPairedDecode(name)) continue;
    const auto twin = by_shape.find(TwinShape(name));
    DecodeBandwidthRow own;
    if (twin == by_shape.end() && !make_row(name, s, own)) continue;
    DecodeBandwidthRow& row =
        twin == by_shape.end() ? own : report.rows[twin->second];
    if (const auto* p = FindMetric(s, kPctReadBwPaired)) {
      row.pct_read_bw_paired = Median(*p);
      row.paired_repetitions = p->size();
    }
    if (twin == by_shape.end()) report.rows.push_back(std::move(own));
  }
  return report;
}

std::map<std::string, double> PctReadBwSameRun(const RunData& run) {
  std::map<std::string, double> out;
  for (const DecodeBandwidthRow& r : DecodeVsReadBandwidth(run).rows) {
    if (!std::isnan(r.pct_read_bw_same_run)) {
      out[r.benchmark] = r.pct_read_bw_same_run;
    }
  }
  return out;
}

std::string FormatDecodeBandwidth(const DecodeBandwidthReport& report) {
  std::string out;
  char line[1024];
  if (report.read_bw.ok()) {
    const ReadBandwidth& bw = *report.read_bw;
    std::snprintf(line, sizeof(line),
                  "read bandwidth in this run (divides %s): %s median %.2f "
                  "GB/s over %zu repetitions (min..max %.2f..%.2f)%s%s%s\n",
                  std::string(kPctReadBwSameRun).c_str(), bw.benchmark.c_str(),
                  bw.median_gbps, bw.repetitions, bw.min_gbps, bw.max_gbps,
                  bw.note.empty() ? "" : " (", bw.note.c_str(),
                  bw.note.empty() ? "" : ")");
    out += line;
  } else {
    out += std::string(kPctReadBwSameRun) + ": not available: " +
           std::string(report.read_bw.status().message()) + "\n";
  }
  out += "start-of-run calibration (divides pct_peak): " +
         (std::isnan(report.calib_read_gbps_start)
              ? std::string("not in the run's context")
              : FixedOrNa(report.calib_read_gbps_start, 2) + " GB/s") +
         "\n";
  if (!report.warning.empty()) out += "warning: " + report.warning + "\n";
  if (report.rows.empty()) return out + "no decode benchmarks in this run\n";
  size_t w = 9;
  for (const auto& r : report.rows) w = std::max(w, r.benchmark.size());
  std::snprintf(line, sizeof(line), "%-*s %5s %12s %16s %21s %19s\n",
                static_cast<int>(w), "benchmark", "reps", "median GB/s",
                "pct_peak(start)", std::string(kPctReadBwSameRun).c_str(),
                std::string(kPctReadBwPaired).c_str());
  out += line;
  bool above = false;
  for (const auto& r : report.rows) {
    if (!r.error.empty()) {
      out += r.benchmark + std::string(w - r.benchmark.size() + 1, ' ') +
             "failed: " + r.error + "\n";
      continue;
    }
    std::snprintf(line, sizeof(line), "%-*s %5zu %12s %16s %21s %19s\n",
                  static_cast<int>(w), r.benchmark.c_str(), r.repetitions,
                  FixedOrNa(r.median_gbps, 2).c_str(),
                  FixedOrNa(r.pct_peak_start, 1).c_str(),
                  FixedOrNa(r.pct_read_bw_same_run, 1).c_str(),
                  FixedOrNa(r.pct_read_bw_paired, 1).c_str());
    out += line;
    above = above || r.pct_read_bw_same_run > 100;
  }
  out += "(" + std::string(kPctReadBwSameRun) +
         " = 100 x median decode GB/s / median read_bw GB/s of this run; " +
         std::string(kPctReadBwPaired) +
         " = median over rounds of decode GB/s / GB/s of the read pass just "
         "before, from the decode_paired/ twin; pct_peak = against the "
         "one-off start-of-run calibration)\n";
  if (above) {
    out +=
        "(above 100: that KV cache stayed in the last-level cache between "
        "calls, so it was not read from DRAM)\n";
  }
  return out;
}

}  // namespace attnkit::bench
