#include "harness/campaign.h"

#include <chrono>
#include <ctime>

#include "harness/shrink.h"

namespace attnkit::harness {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int64_t DefaultCases(Tier t) {
  // Measured with reference + simd + compiled (2-core AMD EPYC Zen 5 family 26,
  // GCC 12.2 with MLIR/LLVM 22, 2026-11-21): default, 1500 cases = 48 s of CPU
  // (the compiled backend's JIT is ~35 s of it: 47 specialization blocks of 32
  // cases at ~0.75 s each); smoke, 300 cases = 16 s; long, 100 cases ~ 25 s of
  // oracle work.
  switch (t) {
    case Tier::kSmoke:
      return 300;
    case Tier::kDefault:
      return 1500;
    case Tier::kLong:
      return 100;
  }
  return 100;
}

std::vector<uint64_t> ShardIndices(int64_t cases, int64_t shard_index,
                                   int64_t shard_count) {
  std::vector<uint64_t> out;
  for (int64_t i = shard_index; i < cases; i += shard_count) {
    out.push_back(static_cast<uint64_t>(i));
  }
  return out;
}

CampaignResult RunCampaign(
    const CampaignOptions& o, std::span<Backend* const> backends,
    const std::function<void(const FailureReport&)>& on_failure) {
  CampaignResult res;
  for (Backend* b : backends) {
    BackendSummary s;
    s.name = std::string(b->name());
    res.backends.push_back(std::move(s));
  }
  std::vector<int> shrunk(backends.size(), 0);
  // Deaths in a row per backend; a quarantined backend is left out.
  std::vector<int> dying(backends.size(), 0);
  std::vector<bool> quarantined(backends.size(), false);
  std::vector<Backend*> active;
  std::vector<size_t> active_index;
  const auto t0 = Clock::now();
  const std::clock_t cpu0 = std::clock();
  auto last_progress = t0;
  const bool by_time = o.time_budget_s > 0;
  for (int64_t k = 0;; ++k) {
    const int64_t index = o.shard_index + k * o.shard_count;
    if (by_time ? Since(t0) >= o.time_budget_s : index >= o.cases) break;
    if (o.stop != nullptr && o.stop->load() != 0) {
      res.interrupted = true;
      break;
    }
    const Case c =
        GenerateCase(o.tier, o.seed, static_cast<uint64_t>(index), o.blocks);
    if (o.max_memory_bytes > 0) {
      const Status fits =
          CaseMemory(c, static_cast<int64_t>(backends.size()))
              .Check(o.max_memory_bytes, "case " + c.ToString());
      if (!fits.ok()) {
        res.fatal = true;
        res.fatal_message = fits.ToString();
        ++res.failures;
        break;
      }
    }
    SetActivity("running case " + c.ToString());
    active.clear();
    active_index.clear();
    for (size_t i = 0; i < backends.size(); ++i) {
      if (quarantined[i]) {
        ++res.backends[i].not_run;
      } else {
        active.push_back(backends[i]);
        active_index.push_back(i);
      }
    }
    auto results = RunCase(c, active);
    if (!results.ok()) {
      res.fatal = true;
      res.fatal_message =
          "case " + c.ToString() +
          " is invalid (a generator bug): " + results.status().ToString();
      ++res.failures;
      break;
    }
    ++res.cases;
    for (size_t k = 0; k < active.size(); ++k) {
      const size_t i = active_index[k];
      const CheckResult& r = (*results)[k];
      BackendSummary& s = res.backends[i];
      s.seconds += r.seconds;
      if (r.outcome == Outcome::kSkipped) {
        ++s.skipped;
        continue;
      }
      ++s.cases;
      if (r.ratio > s.worst_ratio) {
        s.worst_ratio = r.ratio;
        s.worst_case = c.ToString();
      }
      if (IsDeath(r.outcome)) {
        ++s.deaths;
        if (++dying[i] >= o.quarantine_after && o.quarantine_after > 0) {
          quarantined[i] = true;
          s.quarantined = "its worker died in " + std::to_string(dying[i]) +
                          " cases in a row (the last: " + c.ToString() + ")";
        }
      } else {
        dying[i] = 0;
      }
      if (!r.failed()) continue;
      ++s.failures;
      ++res.failures;
      FailureReport rep;
      rep.backend = s.name;
      rep.original = c;
      rep.shrunk = c;
      rep.result = r;
      const bool stopping = o.stop != nullptr && o.stop->load() != 0;
      if (shrunk[i] < o.shrink_per_backend && !stopping) {
        ++shrunk[i];
        const bool death = IsDeath(r.outcome);
        if (death) {
          // Replayed alone in a fresh worker first: a death that needs the
          // calls before it is reported as found, with that said.
          backends[i]->Reset();
          Backend* one[] = {backends[i]};
          auto again = RunCase(c, one);
          rep.reproduced_alone = again.ok() && (*again)[0].outcome == r.outcome;
        }
        const ShrinkResult sr =
            !rep.reproduced_alone
                ? ShrinkResult{c, r, 0, 0}
                : ShrinkOnBackend(c, r, *backends[i], o.max_shrink_attempts,
                                  death ? o.death_shrink_budget_s : 0);
        rep.shrunk = sr.smallest;
        rep.result = sr.failure;
        rep.was_shrunk = rep.reproduced_alone;
        rep.shrink_attempts = sr.attempts;
        rep.shrink_accepted = sr.accepted;
      }
      if (on_failure) on_failure(rep);
      res.reports.push_back(std::move(rep));
    }
    if (o.progress != Progress::kOff) {
      const double gap = o.progress == Progress::kTty ? 0.5 : 10.0;
      if (std::chrono::duration<double>(Clock::now() - last_progress).count() >=
          gap) {
        last_progress = Clock::now();
        const double el = Since(t0);
        std::string goal =
            by_time ? std::to_string(static_cast<int>(o.time_budget_s)) + " s"
                    : std::to_string(o.cases) + " cases";
        std::fprintf(o.progress_stream,
                     "%scheck: %lld cases, %lld failures, %.0f s of %s, "
                     "%.1f cases/s%s",
                     o.progress == Progress::kTty ? "\r" : "",
                     static_cast<long long>(res.cases),
                     static_cast<long long>(res.failures), el, goal.c_str(),
                     static_cast<double>(res.cases) / el,
                     o.progress == Progress::kTty ? "   " : "\n");
        std::fflush(o.progress_stream);
      }
    }
  }
  if (o.progress == Progress::kTty) {
    std::fprintf(o.progress_stream, "\r%80s\r", "");
  }
  res.seconds = Since(t0);
  res.cpu_seconds = static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;
  return res;
}

StatusOr<std::vector<CheckResult>> ReplayCase(
    std::string_view case_text, std::span<Backend* const> backends) {
  ATTNKIT_ASSIGN_OR_RETURN(Case c, ParseCase(case_text));
  return RunCase(c, backends);
}

}  // namespace attnkit::harness
