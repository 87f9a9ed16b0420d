// Reports: a torch-style failure text for people, a per-backend summary
// table, and versioned JSON for machines.
#ifndef ATTNKIT_HARNESS_REPORT_H_
#define ATTNKIT_HARNESS_REPORT_H_

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "harness/campaign.h"
#include "harness/runner.h"

namespace attnkit::harness {

// Bumped whenever a field changes meaning or disappears (additions too, so
// consumers can rely on a version's fields being present).
// 2: deaths, quarantine. 3: plugins, repro_flags, named_backends, decode,
// and per failure max_abs_got/want, max_rel_index, shrink_attempts/accepted
// (what `report merge` needs to rebuild a campaign from its shards).
inline constexpr int kJsonSchemaVersion = 3;

// The one-line command that replays `c` on `backend`; plug-ins needed to
// build that backend are passed along, and `extra_flags` (the isolation
// and deadline flags the run was given) appended as they are.
std::string ReproducerCommand(const Case& c, std::string_view backend,
                              std::span<const std::string> plugins = {},
                              std::string_view extra_flags = {});

// Single quotes for a POSIX shell (case strings never contain one, but a
// plug-in path might).
std::string ShellQuote(std::string_view s);

// "FAIL [simd] mismatch ..." with mismatched count and %, greatest absolute
// and relative differences with their [b, h, i, e] index, the mean error,
// the bounds, seed/index, the (shrunk) problem and the reproducer.
std::string FormatFailure(const FailureReport& f,
                          std::span<const std::string> plugins = {},
                          std::string_view extra_flags = {});

// The same with the reproduce line given: for a front end whose backends
// the CLI cannot build (the Python check replays with
// `attnkit.check(fn, repro=...)`).
std::string FormatFailureWith(const FailureReport& f,
                              std::string_view reproduce);

// One check's result in the same words (the --repro path).
std::string FormatResult(const Case& c, const CheckResult& r);

// backend | cases | failures | skipped | worst err/bound | cases/s, then a
// QUARANTINED line per backend left out after its worker kept dying.
std::string FormatSummary(const CampaignResult& r);

// The decode report's verdict as a check's reports carry it.
struct DecodeVerdict {
  bool ran = false;  // false: it did not run (an interrupted campaign)
  bool interrupted = false;
  int64_t compared = 0;          // configurations run in both modes
  int64_t contract_checked = 0;  // cache-contract configurations
  std::vector<std::string> failures, skipped;
};

struct JsonContext {
  std::string tier;
  uint64_t seed = 0;
  std::string shard;  // "i/n"
  std::span<const std::string> plugins;
  std::string extra_flags;  // for the reproducers (ReproducerCommand)
  // Backends the user named (--backends, --plugin): one that skipped every
  // case means nothing was checked.
  std::vector<std::string> named_backends;
  DecodeVerdict decode;
};
// {"schema_version", "tool", "tier", "seed", "shard", "plugins",
// "repro_flags", "named_backends", "summary": {cases, failures, seconds,
// cpu_seconds, interrupted, fatal}, "backends": [...], "failures": [one
// object per failing case, with its reproducer], "decode": {ran,
// interrupted, compared, contract_checked, failures, skipped}}, keys in that
// order. Non-finite numbers are written as null (JSON has neither NaN nor
// Inf).
std::string CampaignJson(const CampaignResult& r, const JsonContext& ctx);

// JUnit XML for CI systems that read it: one <testsuite> per backend
// (tests, failures, skipped counted in cases), a <testcase> per failing case
// named by its case string with the reproducer as the failure's message, one
// passing <testcase> standing for the cases that passed and one skipped
// <testcase> for the unsupported ones. An interrupted or fatal campaign adds
// an "attnkit" suite whose testcase is an <error>. Text is XML-escaped;
// characters XML 1.0 cannot carry (control characters) are written \xNN.
// The decode report, when it ran, is a "decode" suite with one testcase per
// failure (or one passing testcase).
std::string CampaignJunit(const CampaignResult& r, const JsonContext& ctx);

// The verdict of a check from its parts, as its exit status: 1 a failure
// (a finding, a harness error, an interrupted part: no verdict is no
// pass), 4 nothing checked (0 cases, a named backend that skipped every
// case, a decode report that compared nothing), else 0. `why` gets one line
// per reason that is not a pass.
int CheckVerdict(const CampaignResult& r, const JsonContext& ctx,
                 std::vector<std::string>* why);

}  // namespace attnkit::harness

#endif  // ATTNKIT_HARNESS_REPORT_H_
