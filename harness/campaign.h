// A campaign: the cases of (tier, seed) -- a fixed count or as many as fit a
// time budget, optionally one shard of them -- run on every backend, each
// failure shrunk and reported as it is found, and a per-backend summary.
#ifndef ATTNKIT_HARNESS_CAMPAIGN_H_
#define ATTNKIT_HARNESS_CAMPAIGN_H_

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "harness/case.h"
#include "harness/runner.h"
#include "runtime/backend.h"

namespace attnkit::harness {

enum class Progress : uint8_t {
  kOff = 0,
  kTty,    // one line rewritten in place every 0.5 s
  kLines,  // a full line every 10 s (logs of long CI campaigns)
};

struct CampaignOptions {
  Tier tier = Tier::kDefault;
  uint64_t seed = 1;
  // Campaign case indices are [0, cases); with time_budget_s > 0 instead,
  // indices continue until the budget is spent.
  int64_t cases = 100;
  double time_budget_s = 0;
  // This run takes the indices i with i % shard_count == shard_index, so the
  // shards of one campaign partition its cases.
  int64_t shard_index = 0;
  int64_t shard_count = 1;
  // Failures shrunk per backend (shrinking costs up to max_shrink_attempts
  // runs; the rest are reported unshrunk with their reproducer).
  int shrink_per_backend = 3;
  int max_shrink_attempts = 300;
  // A death (crash, exit, timeout) is shrunk with each candidate in a fresh
  // worker (Backend::Reset) and for at most this long: a hang costs its
  // deadline per candidate that still hangs.
  double death_shrink_budget_s = 60;
  // A backend whose worker died in this many cases in a row is quarantined:
  // not run on the rest of the campaign (its deaths are already findings).
  int quarantine_after = 3;
  // Each case's memory estimate (CaseMemory) is held to this before it
  // runs; over it, the campaign stops with a harness error naming the case
  // and the bytes. 0: no limit.
  int64_t max_memory_bytes = 0;
  // Draw attention-block cases (about 1 in 10; GenerateCase). Off for a
  // backend that can only be an attention (a Python callable): its cases
  // are then exactly those of the campaign without blocks.
  bool blocks = true;
  Progress progress = Progress::kOff;
  FILE* progress_stream = stderr;
  // Polled before each case and each shrink: nonzero stops the campaign
  // (runtime/interrupt.h's StopSignal for SIGINT/SIGTERM); the result is
  // then marked interrupted.
  const std::atomic<int>* stop = nullptr;
};

struct BackendSummary {
  std::string name;
  int64_t cases = 0;  // run (not skipped)
  int64_t failures = 0;
  int64_t skipped = 0;
  double worst_ratio = 0;  // worst error/bound over passing and failing runs
  std::string worst_case;  // the case string of that ratio
  double seconds = 0;      // inside the backend
  int64_t deaths = 0;      // cases in which its worker died
  // Set when quarantined: why, and the cases it then did not run.
  std::string quarantined;
  int64_t not_run = 0;
};

struct FailureReport {
  std::string backend;
  Case original;
  Case shrunk;         // == original when not shrunk
  CheckResult result;  // of `shrunk`
  bool was_shrunk = false;
  int shrink_attempts = 0;
  int shrink_accepted = 0;
  // For a death: false when the case, replayed alone in a fresh worker, did
  // not die the same way (the kernel's state from earlier calls matters;
  // the reproducer may then pass).
  bool reproduced_alone = true;
};

struct CampaignResult {
  int64_t cases = 0;     // cases run (each on every backend)
  int64_t failures = 0;  // failing (case, backend) pairs, harness errors too
  std::vector<BackendSummary> backends;
  std::vector<FailureReport> reports;  // one per failure, in order found
  double seconds = 0;
  // Process CPU time (all threads): on a shared machine the wall clock
  // measures the neighbours too.
  double cpu_seconds = 0;
  // Stopped by options.stop before its cases were done: the counts are of
  // the cases that ran.
  bool interrupted = false;
  bool fatal = false;  // a case did not validate: a harness bug
  std::string fatal_message;
};

// The number of cases a tier's campaign runs unless told otherwise (the
// check CLI and the Python front end alike).
int64_t DefaultCases(Tier t);

// Case indices of a shard of the first `cases` indices.
std::vector<uint64_t> ShardIndices(int64_t cases, int64_t shard_index,
                                   int64_t shard_count);

// Runs the campaign. `on_failure` sees each failure as soon as it is shrunk.
CampaignResult RunCampaign(
    const CampaignOptions& options, std::span<Backend* const> backends,
    const std::function<void(const FailureReport&)>& on_failure = {});

// Replays one case on the backends (no shrinking): the --repro path.
StatusOr<std::vector<CheckResult>> ReplayCase(
    std::string_view case_text, std::span<Backend* const> backends);

}  // namespace attnkit::harness

#endif  // ATTNKIT_HARNESS_CAMPAIGN_H_
