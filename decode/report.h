// The decode report of the main job: for each context length, the same
// decode steps run with the naive concatenating KV update and with the
// in-place KvCache, metered per step (allocations, bytes copied, time split
// into append and attention, peak heap), printed side by side and optionally
// written as JSON. It is also a gate: the in-place path must allocate nothing
// after its first step, copy exactly the new tokens' bytes per step, and
// produce the same outputs as the naive path (and as the f64 oracle).
#ifndef ATTNKIT_DECODE_REPORT_H_
#define ATTNKIT_DECODE_REPORT_H_

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "decode/session.h"
#include "runtime/status.h"

namespace attnkit::decode {

// A backend the report runs (registered or a plug-in): see
// backends/registry.h.
using DecodeBackend = backends::BackendSource;

struct DecodeReportOptions {
  // layers, batch, heads, dtype, layout, steps, backend, seed; start_len is
  // set per row from start_lens.
  DecodeConfig config;
  // Run in turn, each over every start length (--backend a,b|all,
  // --plugin); empty: config.backend / config.make_backend alone. The
  // parser also sets config's backend to the first.
  std::vector<DecodeBackend> backends;
  std::vector<int64_t> start_lens{1024, 4096, 16384};
  std::string json_path;  // empty: no JSON
  // Polled before each (backend, context length): nonzero stops the report
  // (runtime/interrupt.h's StopSignal for SIGINT/SIGTERM).
  const std::atomic<int>* stop = nullptr;
  // Every configuration's memory estimate (DecodeConfig::Memory, the larger
  // mode, plus the report's copies of the outputs) is held to this before
  // anything runs; over it, RunDecodeReport returns RESOURCE_EXHAUSTED
  // naming the configuration and the bytes. 0: no limit (the flag's default
  // is DefaultMaxMemory()).
  int64_t max_memory_bytes = 0;
  bool help = false;
};

// The defaults of `attnkit decode`: one Llama-2-7B-like stack (32 heads of
// 128, MHA, 4 layers), batch 1, f32, 8 steps.
DecodeReportOptions DefaultDecodeOptions();

// Parses the flags of `attnkit decode` with runtime/flags.h (see
// DecodeUsage, generated from the same registrations). A bad flag or value is
// INVALID_ARGUMENT naming both, e.g. "--layers=0: not an integer in [1,
// 4096]".
StatusOr<DecodeReportOptions> ParseDecodeFlags(int argc, char** argv);
std::string DecodeUsage();

// One row: one context length, one mode. Counts are means over the steps
// after the first (the first may warm up a backend, e.g. a JIT), times are
// medians over the same steps; with one step, that step.
struct DecodeReportRow {
  std::string backend;
  DecodeMode mode = DecodeMode::kInPlace;
  int64_t kv_len = 0;  // context length before the first step
  double allocs_per_step = 0;
  double bytes_allocated_per_step = 0;
  double bytes_copied_per_step = 0;
  int64_t new_token_bytes = 0;
  double append_us = 0;
  double attention_us = 0;
  double step_us = 0;
  int64_t peak_bytes = 0;  // -1 without allocation hooks
  // An i8 cache's in-place row, for information (not a gate): the end-to-end
  // error of quantizing the cache -- every step's and layer's output against
  // the same session with an unquantized (q's dtype) cache, same backend,
  // same prompt and tokens: the largest |difference| and that over the
  // largest |output|. NaN for other rows.
  double kv_quant_max_err = std::numeric_limits<double>::quiet_NaN();
  double kv_quant_rel_err = std::numeric_limits<double>::quiet_NaN();
};

struct DecodeReport {
  std::vector<DecodeReportRow> rows;
  // One line per violated guarantee; empty means the gate passes.
  std::vector<std::string> failures;
  // Stopped by options.stop before every row ran: the rows are the ones
  // that did.
  bool interrupted = false;
  // One line per configuration a backend's Supports() declined, with its
  // reason: not run, not a failure -- but a report whose every
  // configuration was skipped compared nothing (nothing_compared()).
  std::vector<std::string> skipped;
  // Configurations (backend x context length) run in both modes and
  // compared.
  int64_t compared = 0;
  // Cache-contract configurations (a ragged batch in each layout) run and
  // audited after the table's.
  int64_t contract_checked = 0;
  bool nothing_compared() const { return compared == 0; }
};

// Runs every context length in both modes. Progress lines go to `log`
// (may be null). An error Status means the run could not happen (bad
// configuration, out of memory); broken guarantees are in failures.
StatusOr<DecodeReport> RunDecodeReport(const DecodeReportOptions& options,
                                       std::FILE* log);

std::string FormatDecodeTable(const DecodeReport& report,
                              const DecodeReportOptions& options);
// {"schema": "attnkit.decode.v1", "config": {...}, "rows": [{backend, mode,
// kv_len, allocs_per_step, bytes_allocated_per_step, bytes_copied_per_step,
// new_token_bytes, append_us, attention_us, step_us, peak_bytes, and for an
// i8 cache's in-place rows kv_quant_max_err, kv_quant_rel_err}, ...],
// "failures": [...], "skipped": [...]}, keys in that order. Non-finite numbers
// are written as null (JSON has neither NaN nor Inf).
std::string DecodeReportJson(const DecodeReport& report,
                             const DecodeReportOptions& options);

// The memory estimate of one configuration of the report: the larger of
// its two sessions, plus the outputs the report copies to compare them.
MemoryEstimate DecodeReportMemory(const DecodeConfig& config);

// The whole command: 0 when every guarantee holds, 1 when one is broken or
// the run failed, 2 for bad flags or a configuration over --max-memory,
// 4 (kExitNothingChecked) when every configuration was skipped.
int DecodeMain(int argc, char** argv);

}  // namespace attnkit::decode

#endif  // ATTNKIT_DECODE_REPORT_H_
