// The dashboard: one self-contained static HTML page (inline SVG and CSS, a
// few lines of inline script for filtering; no network, no library) drawn
// from the history store.
#ifndef ATTNKIT_BENCH_DASHBOARD_H_
#define ATTNKIT_BENCH_DASHBOARD_H_

#include <string>
#include <vector>

#include "bench/compare.h"
#include "bench/run_data.h"

namespace attnkit::bench {

// `runs` oldest first (one host). Per benchmark: time, GFLOPS and %peak (or
// GBps, allocs and bytes copied per step, whichever it reports) across the
// runs, each point labelled with its commit; points where the gate flags run
// i against run i-1 are marked (class "regression"); a table of the latest
// run against the previous one; a table of the latest run's decode
// benchmarks against its own read bandwidth (<table id="decode-bw">), and a
// pct_read_bw_same_run plot per decode benchmark (decode_bandwidth.h). Every
// plot is an <svg class="plot"> holding one <polyline class="series"> with one
// vertex per run that has the metric.
std::string RenderDashboard(const std::vector<RunData>& runs,
                            const CompareOptions& options = {});

}  // namespace attnkit::bench

#endif  // ATTNKIT_BENCH_DASHBOARD_H_
