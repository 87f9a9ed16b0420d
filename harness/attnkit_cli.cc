// The main job's command line. `check` runs every registered backend (and
// any plug-in) against the f64 oracle over a seeded campaign of shapes,
// prints each failure shrunk with a one-line reproducer, then one row per
// backend, then runs the decode-step report's small configuration over the
// same backends; it exits 1 on any mismatch of either (the CI gate) and 2 on
// bad usage.
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "backends/registry.h"
#include "decode/report.h"
#include "harness/campaign.h"
#include "harness/merge.h"
#include "harness/report.h"
#include "runtime/backend.h"
#include "runtime/flags.h"
#include "runtime/interrupt.h"
#include "runtime/limits.h"
#include "runtime/parse.h"
#include "runtime/report_file.h"

namespace attnkit {
namespace {

using harness::CampaignOptions;
using harness::Tier;

struct Flags {
  CampaignOptions campaign;
  std::optional<std::vector<std::string>> backends;
  std::string json_path, junit_path;
  std::optional<std::string> repro;
  std::vector<std::string> plugins;
  int64_t max_memory = 0;  // set from DefaultMaxMemory() unless given
  double max_work = kDefaultMaxWork;
  backends::ResolveOptions resolve;
  // The isolation flags as given, for the reproducers.
  std::string repro_flags;
};

std::vector<std::string> Split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string_view::npos) end = s.size();
    out.emplace_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// "i/n" with 0 <= i < n <= 2^20 into *index, *count.
bool ParseShard(std::string_view v, int64_t* index, int64_t* count) {
  const size_t slash = v.find('/');
  if (slash == std::string_view::npos) return false;
  const auto i = ParseUint64(v.substr(0, slash));
  const auto n = ParseUint64(v.substr(slash + 1));
  if (!i || !n || *n < 1 || *i >= *n || *n > (1u << 20)) return false;
  *index = static_cast<int64_t>(*i);
  *count = static_cast<int64_t>(*n);
  return true;
}

FlagParser CheckFlags(Flags& f) {
  FlagParser p(
      "attnkit check [--tier smoke|default|long] [--seed N]\n"
      "                     [--cases N | --time-budget SECONDS]\n"
      "                     [--backends a,b] [--shard i/n] [--json FILE]\n"
      "                     [--junit FILE]\n"
      "                     [--repro CASE] [--plugin lib.so]...",
      "Checks every registered backend (and plug-in) against the f64 oracle\n"
      "over a seeded campaign of shapes; prints each failure shrunk, with a\n"
      "one-line reproducer, then one row per backend.");
  CampaignOptions& c = f.campaign;
  p.Enum("--tier", &c.tier, harness::kTierNames,
         "case sizes: smoke (ctest), default (the CI gate), long\n"
         "(contexts up to 32k); default: default")
      .Uint64("--seed", &c.seed,
              "campaign seed; the same seed gives the same cases")
      .Custom("--cases", "N",
              "cases to run (default: smoke 300, default 1500, "
              "long 100)",
              [&c](std::string_view v) -> std::string {
                const auto n = ParseUint64(v);
                if (!n || *n > (uint64_t{1} << 40)) {
                  return "not an integer in " +
                         IntegerRange(0, int64_t{1} << 40);
                }
                c.cases = static_cast<int64_t>(*n);
                return "";
              })
      .Seconds("--time-budget", &c.time_budget_s, 1e7,
               "run cases until this many seconds have passed instead")
      .Custom("--backends", "a,b",
              "comma-separated backends to check (default: all, plus\n"
              "plug-ins; 'plugins' stands for every --plugin's)",
              [&f](std::string_view v) -> std::string {
                std::vector<std::string> names = Split(v, ',');
                for (const std::string& n : names) {
                  if (n.empty()) return "has an empty backend name";
                }
                f.backends = std::move(names);
                return "";
              })
      .Custom("--shard", "i/n",
              "run shard i of n (0-based); the n shards partition the\n"
              "campaign's cases (default: GTEST_SHARD_INDEX/\n"
              "GTEST_TOTAL_SHARDS when set)",
              [&c](std::string_view v) -> std::string {
                if (!ParseShard(v, &c.shard_index, &c.shard_count)) {
                  return "not i/n with 0 <= i < n";
                }
                return "";
              })
      .NonEmptyString("--json", &f.json_path, "FILE",
                      "also write the results as JSON (schema_version 2)",
                      "empty file name")
      .NonEmptyString("--junit", &f.junit_path, "FILE",
                      "also write the results as JUnit XML (a testsuite "
                      "per\nbackend, each failure with its reproducer)",
                      "empty file name")
      .Custom("--repro", "CASE",
              "replay one case string printed by a failure, exactly",
              [&f](std::string_view v) -> std::string {
                f.repro = std::string(v);
                return "";
              })
      .Strings("--plugin", &f.plugins, "lib.so",
               "load a kernel through plugin/attnkit_plugin.h (repeatable)",
               "needs a file name");
  backends::AddIsolationFlags(p, &f.resolve);
  p.Custom("--max-memory", "BYTES",
           "refuse a case (or decode configuration) whose estimated\n"
           "memory exceeds this; K, M, G, T suffixes (default: 80% of\n"
           "MemAvailable)",
           [&f](std::string_view v) -> std::string {
             const auto n = ParseByteSize(v);
             if (!n) return "not a byte count in [1, 2^62] (e.g. 512M, 4G)";
             f.max_memory = *n;
             return "";
           })
      .Custom("--max-work", "N",
              "refuse a --repro case whose f64 oracle needs more than N\n"
              "multiply-adds (batch*heads*q*kv*head_dim over its calls;\n"
              "default 2e9, ~8 s)",
              [&f](std::string_view v) -> std::string {
                const std::string text(v);
                char* end = nullptr;
                const double n = std::strtod(text.c_str(), &end);
                if (text.empty() || end != text.c_str() + text.size() ||
                    !(n >= 1) || n > 1e30) {
                  return "not a number of multiply-adds in [1, 1e30]";
                }
                f.max_work = n;
                return "";
              })
      .Epilogue(
          "After the campaign (not after --repro) the decode-step report runs "
          "on a\nsmall configuration (2 layers, 8:2 heads of 64, 8 steps from "
          "contexts\n256, 1024, 4096) over the same backends; its gate is part "
          "of the verdict.\nThe --json/--junit paths are checked (and a "
          "previous file removed) before\nthe run; each is written whole at "
          "its end. On SIGINT/SIGTERM the campaign\nstops after the case in "
          "flight, writes the reports marked interrupted\n(the decode report "
          "does not run) and exits 128 + the signal.\nExit status: 0 all "
          "passed, 1 a mismatch (or harness error), 2 bad usage\n(or a size "
          "over --max-memory / --max-work), 4 nothing checked (0 cases,\na "
          "backend named by --backends or --plugin that skipped every case, "
          "or a\ndecode gate that compared nothing), 130/143 interrupted.\n");
  return p;
}

// A flag error: "check: --cases=abc: not an integer in [0, 2^40]", then the
// usage; exit status 2.
int Bad(const FlagParser& p, std::string_view message) {
  std::fprintf(stderr, "check: %.*s\n%s", static_cast<int>(message.size()),
               message.data(), p.Usage().c_str());
  return 2;
}
int Bad(const FlagParser& p, std::string_view flag, std::string_view value,
        std::string_view why) {
  return Bad(p, std::string(flag) + "=" + std::string(value) + ": " +
                    std::string(why));
}

// A request the limits refuse (--max-memory, --max-work): one line naming
// the flag, its value and why, no usage; exit status 2.
int Refused(std::string_view flag, std::string_view value,
            std::string_view why) {
  std::fprintf(stderr, "check: %.*s=%.*s: %.*s\n",
               static_cast<int>(flag.size()), flag.data(),
               static_cast<int>(value.size()), value.data(),
               static_cast<int>(why.size()), why.data());
  return kExitUsage;
}

// Returns an exit code on error or --help (after printing), nullopt to run.
std::optional<int> ParseFlags(int argc, char** argv, Flags& f, FlagParser& p) {
  if (Status s = p.Parse(argc, argv); !s.ok()) return Bad(p, s.message());
  if (p.help()) {
    std::printf("%s", p.Usage().c_str());
    return 0;
  }
  const bool cases_given = p.Seen("--cases");
  if (cases_given && p.Seen("--time-budget")) {
    return Bad(p, "--time-budget", std::to_string(f.campaign.time_budget_s),
               "cannot be combined with --cases");
  }
  if (!cases_given) f.campaign.cases = harness::DefaultCases(f.campaign.tier);
  f.repro_flags = backends::IsolationFlagsGiven(p, f.resolve);
  if (!p.Seen("--max-memory")) f.max_memory = DefaultMaxMemory();
  // Test runners that shard by environment (Bazel, gtest-parallel) set
  // these; --shard wins when both are given.
  const char* total = std::getenv("GTEST_TOTAL_SHARDS");
  const char* index = std::getenv("GTEST_SHARD_INDEX");
  if (!p.Seen("--shard") && total != nullptr && index != nullptr) {
    const std::string shard = std::string(index) + "/" + total;
    if (!ParseShard(shard, &f.campaign.shard_index, &f.campaign.shard_count)) {
      return Bad(p, "GTEST_SHARD_INDEX/GTEST_TOTAL_SHARDS", shard,
                 "not i/n with 0 <= i < n");
    }
  }
  return std::nullopt;
}

int Check(int argc, char** argv) {
  Flags f;
  FlagParser flags = CheckFlags(f);
  if (auto code = ParseFlags(argc, argv, f, flags)) return *code;

  // Report paths: checked (and stale reports removed) before any work.
  std::optional<ReportFile> json, junit;
  for (auto [path, flag, file] :
       {std::tuple{&f.json_path, "--json", &json},
        std::tuple{&f.junit_path, "--junit", &junit}}) {
    if (path->empty()) continue;
    auto opened = ReportFile::Open(*path, flag);
    if (!opened.ok()) return Bad(flags, opened.status().message());
    file->emplace(std::move(opened).value());
  }

  // Backends: the registry, then plug-ins, narrowed by --backends.
  auto sources = backends::ResolveBackends(f.plugins, f.backends, f.resolve);
  if (!sources.ok()) {
    if (f.backends && sources.status().message().starts_with("no backend '")) {
      std::string joined;
      for (const std::string& n : *f.backends) {
        joined += (joined.empty() ? "" : ",") + n;
      }
      return Bad(flags, "--backends", joined, sources.status().message());
    }
    return Bad(flags, "--" + sources.status().message());
  }
  std::vector<std::unique_ptr<Backend>> owned;
  std::vector<Backend*> backends;
  for (const backends::BackendSource& s : *sources) {
    auto b = s.make();
    if (!b.ok()) {
      std::fprintf(stderr, "check: backend %s: %s\n", s.name.c_str(),
                   b.status().ToString().c_str());
      return 2;
    }
    owned.push_back(std::move(*b));
    backends.push_back(owned.back().get());
  }

  if (f.repro) {
    auto c = harness::ParseCase(*f.repro);
    if (!c.ok()) {
      return Bad(flags, "--repro", *f.repro, c.status().ToString());
    }
    // Its cost and memory are checked before anything is allocated.
    if (const double work = harness::CaseWork(*c); work > f.max_work) {
      char line[160];
      std::snprintf(line, sizeof(line),
                    "the f64 oracle needs %.3g multiply-adds "
                    "(batch*heads*q*kv*head_dim over its calls), over "
                    "--max-work=%.3g; pass a larger --max-work to run it",
                    work, f.max_work);
      return Refused("--repro", *f.repro,
                     Status::ResourceExhausted(line).ToString());
    }
    if (Status fits =
            harness::CaseMemory(*c, static_cast<int64_t>(backends.size()))
                .Check(f.max_memory, "the case");
        !fits.ok()) {
      return Refused("--repro", *f.repro, fits.ToString());
    }
    SetActivity("replaying case " + c->ToString());
    auto results = harness::RunCase(*c, backends);
    if (!results.ok()) {
      return Bad(flags, "--repro", *f.repro, results.status().ToString());
    }
    int failures = 0, skipped = 0;
    for (const harness::CheckResult& r : *results) {
      std::printf("%s", harness::FormatResult(*c, r).c_str());
      failures += r.failed() ? 1 : 0;
      skipped += r.outcome == harness::Outcome::kSkipped ? 1 : 0;
    }
    if (failures > 0) return kExitFinding;
    if (skipped == static_cast<int>(results->size())) {
      std::printf("check: NOTHING CHECKED: every backend skipped the case\n");
      return kExitNothingChecked;
    }
    return kExitPass;
  }

  CampaignOptions& o = f.campaign;
  InstallStopHandlers();
  o.stop = &StopSignal();
  o.max_memory_bytes = f.max_memory;
  // A line rewritten in place on a terminal; in logs, a line every 10 s
  // (so only campaigns longer than that print any).
  o.progress = isatty(STDERR_FILENO) ? harness::Progress::kTty
                                     : harness::Progress::kLines;
  std::printf(
      "check: tier %s, seed %llu, %s, shard %lld/%lld, %zu backend(s)"
      "\n",
      std::string(harness::TierName(o.tier)).c_str(),
      static_cast<unsigned long long>(o.seed),
      o.time_budget_s > 0
          ? (std::to_string(o.time_budget_s) + " s budget").c_str()
          : (std::to_string(o.cases) + " cases").c_str(),
      static_cast<long long>(o.shard_index),
      static_cast<long long>(o.shard_count), backends.size());
  std::fflush(stdout);
  // The first failures of each backend are shrunk and printed in full; the
  // next ones get a line each, then only the summary (and JSON) count them:
  // a broken backend fails every case.
  constexpr int kOneLiners = 20;
  std::map<std::string, int> printed;
  const harness::CampaignResult res =
      harness::RunCampaign(o, backends, [&](const harness::FailureReport& rep) {
        const int n = printed[rep.backend]++;
        if (rep.was_shrunk || !rep.reproduced_alone) {
          std::printf(
              "%s\n",
              harness::FormatFailure(rep, f.plugins, f.repro_flags).c_str());
        } else if (n < o.shrink_per_backend + kOneLiners) {
          std::printf(
              "FAIL [%s] %s: %s\n", rep.backend.c_str(),
              std::string(harness::OutcomeName(rep.result.outcome)).c_str(),
              harness::ReproducerCommand(rep.shrunk, rep.backend, f.plugins,
                                         f.repro_flags)
                  .c_str());
        } else if (n == o.shrink_per_backend + kOneLiners) {
          std::printf("FAIL [%s] ... further failures only in the summary%s\n",
                      rep.backend.c_str(),
                      f.json_path.empty() ? "" : " and the JSON");
        }
        std::fflush(stdout);
      });
  if (res.fatal) std::printf("HARNESS ERROR: %s\n", res.fatal_message.c_str());
  std::printf("%s", harness::FormatSummary(res).c_str());
  std::fflush(stdout);  // before any backend's exit-time teardown
  harness::JsonContext ctx;
  ctx.tier = std::string(harness::TierName(o.tier));
  ctx.seed = o.seed;
  ctx.shard =
      std::to_string(o.shard_index) + "/" + std::to_string(o.shard_count);
  ctx.plugins = f.plugins;
  ctx.extra_flags = f.repro_flags;
  // The backends the user named: --backends, and every plug-in.
  const std::vector<std::string> registered =
      backends::RegisteredBackendNames();
  for (const harness::BackendSummary& b : res.backends) {
    auto in = [&](const std::vector<std::string>& v) {
      return std::find(v.begin(), v.end(), b.name) != v.end();
    };
    if ((f.backends && in(*f.backends)) || !in(registered)) {
      ctx.named_backends.push_back(b.name);
    }
  }
  // The reports are written once the verdict is known (the decode report's
  // part of it too); false when one could not be written.
  auto write_reports = [&] {
    for (auto [file, text] :
         {std::pair{&json, std::function([&] {
                      return harness::CampaignJson(res, ctx);
                    })},
          std::pair{&junit, std::function([&] {
                      return harness::CampaignJunit(res, ctx);
                    })}}) {
      if (!*file) continue;
      if (Status s = (*file)->Commit(text()); !s.ok()) {
        std::fprintf(stderr, "check: %s\n", s.message().c_str());
        return false;
      }
    }
    return true;
  };
  if (res.interrupted) {
    if (!write_reports()) return kExitUsage;
    const int sig = StopSignal().load();
    std::printf(
        "check: INTERRUPTED by signal %d after %lld case(s): no verdict on "
        "the rest; the decode report did not run\n",
        sig, static_cast<long long>(res.cases));
    std::fflush(stdout);
    return ExitStatusForSignal(sig);
  }
  // No false green: a campaign of no case, or a backend the user named
  // (--backends, --plugin) that skipped every case, checked nothing.
  std::vector<std::string> why;
  harness::CheckVerdict(res, ctx, &why);
  for (const std::string& w : why) {
    if (w.starts_with("NOTHING CHECKED: ")) {
      std::printf("check: %s\n", w.c_str());
    }
  }
  if (res.fatal && res.fatal_message.starts_with("RESOURCE_EXHAUSTED")) {
    write_reports();
    return kExitUsage;  // a case over --max-memory: the flags' to change
  }

  // The decode-step report's small configuration (GQA 8:2, 2 layers, 8 steps
  // up to a 4k context, then an i8 cache at 1k) over the same backends: a
  // few seconds in all. Its
  // gate (no allocation after the first step, exactly the new tokens' bytes
  // copied, the cache exact after every append, outputs equal to the naive
  // path's and the oracle's) is part of the check's verdict.
  decode::DecodeReportOptions d = decode::DefaultDecodeOptions();
  d.config.layers = 2;
  d.config.q_heads = 8;
  d.config.kv_heads = 2;
  d.config.head_dim = 64;
  d.config.steps = 8;
  d.start_lens = {256, 1024, 4096};
  d.backends = *sources;
  d.stop = &StopSignal();
  d.max_memory_bytes = f.max_memory;
  auto report = decode::RunDecodeReport(d, stderr);
  ctx.decode.ran = true;
  if (!report.ok()) {
    std::printf("decode: %s\n", report.status().ToString().c_str());
    ctx.decode.failures.push_back(report.status().ToString());
    write_reports();
    return report.status().code() == StatusCode::kResourceExhausted
               ? kExitUsage
               : kExitFinding;
  }
  std::printf("%s", decode::FormatDecodeTable(*report, d).c_str());
  // The same gate on a quantized (i8) cache, at one context length: the
  // append quantizes in place (0 allocations, exactly the int8 rows and
  // their scales written), the cache and its scales audited after every
  // append; a backend that declines i8 is skipped there, with its reason.
  if (!report->interrupted) {
    // The table out before the next report's progress lines on stderr (a
    // CI log that merges both streams would cut a line of it in two).
    std::fflush(stdout);
    decode::DecodeReportOptions q = d;
    q.config.kv_dtype = DType::kI8;
    q.start_lens = {1024};
    auto quantized = decode::RunDecodeReport(q, stderr);
    if (!quantized.ok()) {
      std::printf("decode: %s\n", quantized.status().ToString().c_str());
      report->failures.push_back(quantized.status().ToString());
    } else {
      std::printf("%s", decode::FormatDecodeTable(*quantized, q).c_str());
      report->interrupted = quantized->interrupted;
      report->compared += quantized->compared;
      report->contract_checked += quantized->contract_checked;
      for (std::string& f : quantized->failures) {
        report->failures.push_back("kv_dtype=i8: " + std::move(f));
      }
      for (std::string& s : quantized->skipped) {
        report->skipped.push_back(std::move(s));
      }
    }
  }
  // What the backends did for the whole run (campaign and decode report).
  for (Backend* b : backends) {
    if (std::string n = b->Notes(); !n.empty()) {
      std::printf("note [%s]: %s\n", std::string(b->name()).c_str(), n.c_str());
    }
  }
  ctx.decode.interrupted = report->interrupted;
  ctx.decode.compared = report->compared;
  ctx.decode.contract_checked = report->contract_checked;
  ctx.decode.failures = report->failures;
  ctx.decode.skipped = report->skipped;
  if (!write_reports()) return kExitUsage;
  if (report->interrupted) {
    return ExitStatusForSignal(StopSignal().load());
  }
  return harness::CheckVerdict(res, ctx, nullptr);
}

}  // namespace
}  // namespace attnkit

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "help") == 0 ||
      std::strcmp(argv[1], "--help") == 0) {
    std::printf(
        "usage: attnkit_cli check [flags]   (check --help)\n"
        "       attnkit_cli report merge SHARD.json... [--json F] [--junit "
        "F]\n");
    return argc < 2 ? 2 : 0;
  }
  if (std::strcmp(argv[1], "check") == 0) {
    // The last resort: every size is estimated and checked before it is
    // allocated, so this is an allocation the estimates missed.
    try {
      return attnkit::Check(argc - 2, argv + 2);
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr,
                   "check: out of memory (std::bad_alloc) while %s; lower "
                   "the sizes or --max-memory\n",
                   attnkit::Activity().c_str());
      return attnkit::kExitFinding;
    }
  }
  if (std::strcmp(argv[1], "report") == 0) {
    return attnkit::harness::ReportMain(argc - 2, argv + 2);
  }
  std::fprintf(stderr, "attnkit_cli: unknown command '%s'\n", argv[1]);
  return 2;
}
