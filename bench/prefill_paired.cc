#include "bench/prefill_paired.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "runtime/stats.h"

namespace attnkit::bench {
namespace {

// Each paired family and the family of its twin.
constexpr std::pair<std::string_view, std::string_view> kFamilies[] = {
    {"prefill_paired/", "prefill/"}, {"prefill_bf16_paired/", "prefill_bf16/"}};

}  // namespace

std::vector<PrefillPairedRow> PrefillVsPairedFma(const RunData& run) {
  // Twins by (family, shape): the start-of-run figure of each.
  std::map<std::pair<std::string_view, std::string>, double> twins;
  for (const auto& [name, s] : run.benchmarks) {
    for (const auto& [paired, twin] : kFamilies) {
      if (name.starts_with(twin)) {
        twins[{twin, TwinShape(name)}] = MedianMetric(s, "pct_peak");
      }
    }
  }
  std::vector<PrefillPairedRow> rows;
  for (const auto& [name, s] : run.benchmarks) {
    for (const auto& [paired, twin] : kFamilies) {
      if (!name.starts_with(paired)) continue;
      PrefillPairedRow r;
      r.benchmark = name;
      r.error = s.error;
      const std::vector<double>* t = FindMetric(s, kTimeMetric);
      r.repetitions = t == nullptr ? 0 : t->size();
      r.median_gflops = MedianMetric(s, "GFLOPS");
      r.fma_gflops = MedianMetric(s, "fma_GFLOPS");
      r.pct_fma_paired = MedianMetric(s, kPctFmaPaired);
      auto tw = twins.find({twin, TwinShape(name)});
      r.twin_pct_peak = tw == twins.end() ? NAN : tw->second;
      rows.push_back(std::move(r));
    }
  }
  return rows;
}

std::string FormatPrefillPaired(const std::vector<PrefillPairedRow>& rows) {
  if (rows.empty()) return "";
  size_t w = 9;
  for (const auto& r : rows) w = std::max(w, r.benchmark.size());
  std::string out;
  char line[1024];
  std::snprintf(line, sizeof(line), "%-*s %5s %13s %11s %16s %15s\n",
                static_cast<int>(w), "benchmark", "reps", "median GFLOPS",
                "FMA GFLOPS", "pct_peak(start)",
                std::string(kPctFmaPaired).c_str());
  out += line;
  for (const auto& r : rows) {
    if (!r.error.empty()) {
      out += r.benchmark + std::string(w - r.benchmark.size() + 1, ' ') +
             "failed: " + r.error + "\n";
      continue;
    }
    std::snprintf(line, sizeof(line), "%-*s %5zu %13s %11s %16s %15s\n",
                  static_cast<int>(w), r.benchmark.c_str(), r.repetitions,
                  FixedOrNa(r.median_gflops, 1).c_str(),
                  FixedOrNa(r.fma_gflops, 1).c_str(),
                  FixedOrNa(r.twin_pct_peak, 1).c_str(),
                  FixedOrNa(r.pct_fma_paired, 1).c_str());
    out += line;
  }
  out += "(" + std::string(kPctFmaPaired) +
         " = median over rounds of prefill GFLOPS / GFLOPS of the FMA loop "
         "just before, on the same threads; pct_peak(start) = the prefill/ "
         "twin's, against the one-off start-of-run calibration)\n";
  return out;
}

}  // namespace attnkit::bench
