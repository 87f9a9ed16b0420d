#include "harness/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/limits.h"
#include "runtime/text.h"

namespace attnkit::harness {
namespace {

std::string Fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, x);
  return buf;
}

std::string G(double x) { return Fmt("%.6g", x); }

std::string Index(const std::array<int64_t, 4>& i) {
  return "(" + std::to_string(i[0]) + ", " + std::to_string(i[1]) + ", " +
         std::to_string(i[2]) + ", " + std::to_string(i[3]) + ")";
}

std::string Details(const CheckResult& r) {
  std::string s;
  const ErrorStats& e = r.error;
  switch (r.outcome) {
    case Outcome::kMismatch:
    case Outcome::kNonFinite: {
      s += "  Mismatched elements: " + std::to_string(e.mismatched) + " / " +
           std::to_string(e.count) + " (" +
           Fmt("%.1f", e.count ? 100.0 * static_cast<double>(e.mismatched) /
                                     static_cast<double>(e.count)
                               : 0.0) +
           "%)\n";
      // Which bound failed, with both numbers: a mean-bound failure has no
      // element over the max bound ("Mismatched elements: 0").
      if (r.outcome == Outcome::kMismatch) {
        const bool max_failed = e.max_abs > r.bounds.max_abs;
        const bool mean_failed = e.mean_abs > r.bounds.mean_abs;
        if (max_failed) {
          s += "  Failed bound: max |err| " + G(e.max_abs) + " > " +
               G(r.bounds.max_abs) + " allowed (mean |err| " + G(e.mean_abs) +
               (mean_failed ? " > " : " <= ") + G(r.bounds.mean_abs) + ")\n";
        } else if (mean_failed) {
          s += "  Failed bound: mean |err| " + G(e.mean_abs) + " > " +
               G(r.bounds.mean_abs) +
               " allowed; every element is within the max bound (max |err| " +
               G(e.max_abs) + " <= " + G(r.bounds.max_abs) +
               "): the error is small but systematic\n";
        }
      }
      if (e.nonfinite > 0) {
        s += "  NaN/Inf where the oracle is finite: " +
             std::to_string(e.nonfinite) + " element(s), the first at index " +
             Index(e.first_nonfinite_index) + "\n";
      }
      s += "  Greatest absolute difference: " + G(e.max_abs) + " at index " +
           Index(e.max_abs_index) + " (got " + G(e.max_abs_got) + ", want " +
           G(e.max_abs_want) + "; up to " + G(r.bounds.max_abs) + " allowed)\n";
      s += "  Greatest relative difference: " + G(e.max_rel) + " at index " +
           Index(e.max_rel_index) + "\n";
      s += "  Mean absolute difference: " + G(e.mean_abs) + " (up to " +
           G(r.bounds.mean_abs) + " allowed)\n";
      break;
    }
    default:
      s += "  " + r.message + "\n";
      break;
  }
  if (r.step >= 0) {
    s += "  At decode step " + std::to_string(r.step) + ", problem " +
         r.problem.ToString() + "\n";
  }
  return s;
}

std::string Header(const std::string& backend, const CheckResult& r) {
  std::string what;
  switch (r.outcome) {
    case Outcome::kMismatch:
      what = "Tensor-likes are not close!";
      break;
    case Outcome::kNonFinite:
      what = "NaN/Inf where the oracle has none";
      break;
    case Outcome::kKvCache:
      what = "KV cache differs from the naive concatenation";
      break;
    case Outcome::kStrayWrite:
      what = "wrote memory it does not own";
      break;
    case Outcome::kInputWrite:
      what = "wrote an input it may only read";
      break;
    case Outcome::kError:
      what = "returned an error on a supported problem";
      break;
    case Outcome::kCrash:
      what = "its worker process crashed";
      break;
    case Outcome::kExit:
      what = "its worker process exited in the middle of a call";
      break;
    case Outcome::kTimeout:
      what = "hung: no answer before the call's deadline";
      break;
    default:
      what = std::string(OutcomeName(r.outcome));
      break;
  }
  return "FAIL [" + backend + "] " + std::string(OutcomeName(r.outcome)) +
         ": " + what + "\n";
}

}  // namespace

std::string ShellQuote(std::string_view s) {
  std::string o = "'";
  for (char ch : s) {
    if (ch == '\'') {
      o += "'\\''";
    } else {
      o += ch;
    }
  }
  return o + "'";
}

std::string ReproducerCommand(const Case& c, std::string_view backend,
                              std::span<const std::string> plugins,
                              std::string_view extra_flags) {
  std::string s = "./attnkit check --repro " + ShellQuote(c.ToString()) +
                  " --backends " + std::string(backend);
  for (const std::string& p : plugins) s += " --plugin " + ShellQuote(p);
  if (!extra_flags.empty()) s += " " + std::string(extra_flags);
  return s;
}

std::string FormatFailure(const FailureReport& f,
                          std::span<const std::string> plugins,
                          std::string_view extra_flags) {
  return FormatFailureWith(
      f, ReproducerCommand(f.shrunk, f.backend, plugins, extra_flags));
}

std::string FormatFailureWith(const FailureReport& f,
                              std::string_view reproduce) {
  std::string s = Header(f.backend, f.result) + Details(f.result);
  const Case& c = f.shrunk;
  s += "  Seed " + std::to_string(c.seed) + ", case " +
       std::to_string(c.index) + ", values " +
       std::string(ValueProfileName(c.profile)) +
       (c.decode_steps > 0
            ? ", decode loop of " + std::to_string(c.decode_steps) + " steps"
            : std::string()) +
       ", problem " + c.problem.ToString() + "\n";
  if (f.was_shrunk) {
    s += "  Shrunk from " + f.original.problem.ToString() + " (" +
         std::to_string(f.shrink_accepted) + " of " +
         std::to_string(f.shrink_attempts) + " simplifications kept)\n";
  }
  if (!f.reproduced_alone) {
    s += "  Not shrunk: replayed alone in a fresh worker it did not " +
         std::string(OutcomeName(f.result.outcome)) +
         " -- the kernel's state from the calls before it matters, and the "
         "reproducer below may pass\n";
  }
  s += "  Reproduce: " + std::string(reproduce) + "\n";
  return s;
}

std::string FormatResult(const Case& c, const CheckResult& r) {
  if (r.outcome == Outcome::kSkipped) {
    return "SKIP [" + r.backend + "] " + r.message + "\n";
  }
  if (!r.failed()) {
    return "PASS [" + r.backend + "] worst error/bound " + G(r.ratio) +
           " (max |err| " + G(r.error.max_abs) + " <= " + G(r.bounds.max_abs) +
           ", mean |err| " + G(r.error.mean_abs) +
           " <= " + G(r.bounds.mean_abs) + ")\n";
  }
  return Header(r.backend, r) + Details(r) + "  Case: " + c.ToString() + "\n";
}

std::string FormatSummary(const CampaignResult& r) {
  std::string s;
  char line[256];
  std::snprintf(line, sizeof(line), "%-24s %8s %9s %8s %16s %10s\n", "backend",
                "cases", "failures", "skipped", "worst err/bound", "cases/s");
  s += line;
  for (const BackendSummary& b : r.backends) {
    const std::string ratio = std::isfinite(b.worst_ratio)
                                  ? Fmt("%.3f", b.worst_ratio)
                                  : std::string("inf (NaN)");
    std::snprintf(
        line, sizeof(line), "%-24s %8lld %9lld %8lld %16s %10.0f\n",
        b.name.c_str(), static_cast<long long>(b.cases),
        static_cast<long long>(b.failures), static_cast<long long>(b.skipped),
        ratio.c_str(),
        b.seconds > 0 ? static_cast<double>(b.cases) / b.seconds : 0.0);
    s += line;
  }
  for (const BackendSummary& b : r.backends) {
    if (b.quarantined.empty()) continue;
    s += "QUARANTINED [" + b.name + "] " + b.quarantined + "; not run on the " +
         std::to_string(b.not_run) + " case(s) after\n";
  }
  std::snprintf(
      line, sizeof(line),
      "%lld cases in %.1f s, %.1f s CPU (%.0f cases/min, oracle and "
      "reference included): %lld failure(s)\n",
      static_cast<long long>(r.cases), r.seconds, r.cpu_seconds,
      r.seconds > 0 ? 60.0 * static_cast<double>(r.cases) / r.seconds : 0.0,
      static_cast<long long>(r.failures));
  s += line;
  return s;
}

std::string CampaignJson(const CampaignResult& r, const JsonContext& ctx) {
  using Json = nlohmann::ordered_json;
  Json backends = Json::array();
  for (const BackendSummary& b : r.backends) {
    backends.push_back(
        {{"name", b.name},
         {"cases", b.cases},
         {"failures", b.failures},
         {"skipped", b.skipped},
         {"worst_ratio", b.worst_ratio},
         {"worst_case", b.worst_case},
         {"seconds", b.seconds},
         {"deaths", b.deaths},
         {"quarantined",
          b.quarantined.empty() ? Json(nullptr) : Json(b.quarantined)},
         {"not_run", b.not_run}});
  }
  Json failures = Json::array();
  for (const FailureReport& f : r.reports) {
    const CheckResult& c = f.result;
    failures.push_back(
        {{"backend", f.backend},
         {"outcome", OutcomeName(c.outcome)},
         {"case", f.shrunk.ToString()},
         {"original_case", f.original.ToString()},
         {"shrunk", f.was_shrunk},
         {"reproducer",
          ReproducerCommand(f.shrunk, f.backend, ctx.plugins, ctx.extra_flags)},
         {"reproduced_alone", f.reproduced_alone},
         {"step", c.step},
         {"message", c.message},
         {"mismatched", c.error.mismatched},
         {"compared", c.error.count},
         {"nonfinite", c.error.nonfinite},
         {"max_abs_err", c.error.max_abs},
         {"max_abs_index", c.error.max_abs_index},
         {"max_rel_err", c.error.max_rel},
         {"mean_abs_err", c.error.mean_abs},
         {"bound_max_abs", c.bounds.max_abs},
         {"bound_mean_abs", c.bounds.mean_abs},
         {"max_abs_got", c.error.max_abs_got},
         {"max_abs_want", c.error.max_abs_want},
         {"max_rel_index", c.error.max_rel_index},
         {"shrink_attempts", f.shrink_attempts},
         {"shrink_accepted", f.shrink_accepted}});
  }
  const DecodeVerdict& d = ctx.decode;
  const Json doc = {
      {"schema_version", kJsonSchemaVersion},
      {"tool", "attnkit check"},
      {"tier", ctx.tier},
      {"seed", ctx.seed},
      {"shard", ctx.shard},
      {"plugins",
       std::vector<std::string>(ctx.plugins.begin(), ctx.plugins.end())},
      {"repro_flags", ctx.extra_flags},
      {"named_backends", ctx.named_backends},
      {"summary",
       {{"cases", r.cases},
        {"failures", r.failures},
        {"seconds", r.seconds},
        {"cpu_seconds", r.cpu_seconds},
        {"interrupted", r.interrupted},
        {"fatal", r.fatal ? Json(r.fatal_message) : Json(nullptr)}}},
      {"backends", backends},
      {"failures", failures},
      {"decode",
       {{"ran", d.ran},
        {"interrupted", d.interrupted},
        {"compared", d.compared},
        {"contract_checked", d.contract_checked},
        {"failures", d.failures},
        {"skipped", d.skipped}}}};
  // dump() writes a non-finite number (an infinite error/bound ratio after a
  // NaN) as null: JSON has no NaN or Inf.
  return doc.dump(2) + "\n";
}

namespace {

std::string Attr(std::string_view name, std::string_view value) {
  return " " + std::string(name) + "=\"" + MarkupEscape(value) + "\"";
}

}  // namespace

std::string CampaignJunit(const CampaignResult& r, const JsonContext& ctx) {
  std::string x = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites" +
                  Attr("name", "attnkit check") +
                  Attr("tests", std::to_string(r.cases)) +
                  Attr("failures", std::to_string(r.failures)) + ">\n";
  for (const BackendSummary& b : r.backends) {
    const int64_t passed = b.cases - b.failures;
    const int64_t tests =
        b.failures + (passed > 0 ? 1 : 0) + (b.skipped > 0 ? 1 : 0);
    x += "  <testsuite" + Attr("name", b.name) +
         Attr("tests", std::to_string(tests)) +
         Attr("failures", std::to_string(b.failures)) +
         Attr("skipped", std::to_string(b.skipped > 0 ? 1 : 0)) +
         Attr("time", std::to_string(b.seconds)) + ">\n";
    x += "    <properties>"
         "<property" +
         Attr("name", "tier") + Attr("value", ctx.tier) + "/><property" +
         Attr("name", "seed") + Attr("value", std::to_string(ctx.seed)) +
         "/><property" + Attr("name", "shard") + Attr("value", ctx.shard) +
         "/></properties>\n";
    for (const FailureReport& f : r.reports) {
      if (f.backend != b.name) continue;
      const std::string repro =
          ReproducerCommand(f.shrunk, f.backend, ctx.plugins, ctx.extra_flags);
      x += "    <testcase" + Attr("classname", "attnkit." + b.name) +
           Attr("name", f.shrunk.ToString()) + ">\n      <failure" +
           Attr("type", OutcomeName(f.result.outcome)) +
           Attr("message", repro) + ">" +
           MarkupEscape(FormatFailure(f, ctx.plugins, ctx.extra_flags)) +
           "</failure>\n    </testcase>\n";
    }
    if (passed > 0) {
      x += "    <testcase" + Attr("classname", "attnkit." + b.name) +
           Attr("name", std::to_string(passed) + " case(s) passed") +
           Attr("time", std::to_string(b.seconds)) + "/>\n";
    }
    if (b.skipped > 0) {
      x += "    <testcase" + Attr("classname", "attnkit." + b.name) +
           Attr("name", std::to_string(b.skipped) +
                            " case(s) unsupported by the backend") +
           "><skipped/></testcase>\n";
    }
    x += "  </testsuite>\n";
  }
  if (const DecodeVerdict& d = ctx.decode; d.ran) {
    const size_t n = d.failures.size();
    x += "  <testsuite" + Attr("name", "decode") +
         Attr("tests", std::to_string(n > 0 ? n : 1)) +
         Attr("failures", std::to_string(n)) + ">\n";
    for (const std::string& f : d.failures) {
      x += "    <testcase" + Attr("classname", "attnkit.decode") +
           Attr("name", f.substr(0, f.find(':'))) + "><failure" +
           Attr("message", f) + "/></testcase>\n";
    }
    if (n == 0) {
      x += "    <testcase" + Attr("classname", "attnkit.decode") +
           Attr("name", std::to_string(d.compared) + " configuration(s), " +
                            std::to_string(d.contract_checked) +
                            " cache-contract configuration(s)") +
           "/>\n";
    }
    x += "  </testsuite>\n";
  }
  if (r.interrupted || r.fatal) {
    x += "  <testsuite" + Attr("name", "attnkit") + Attr("tests", "1") +
         Attr("errors", "1") + ">\n    <testcase" +
         Attr("classname", "attnkit") +
         Attr("name", r.fatal ? "harness" : "campaign") + "><error" +
         Attr("message", r.fatal
                             ? r.fatal_message
                             : "interrupted after " + std::to_string(r.cases) +
                                   " case(s): no verdict on the rest") +
         "/></testcase>\n  </testsuite>\n";
  }
  return x + "</testsuites>\n";
}

int CheckVerdict(const CampaignResult& r, const JsonContext& ctx,
                 std::vector<std::string>* why) {
  std::vector<std::string> fail, unchecked;
  const DecodeVerdict& d = ctx.decode;
  if (r.failures > 0) {
    fail.push_back(std::to_string(r.failures) + " failing case(s)");
  }
  if (r.fatal) fail.push_back("harness error: " + r.fatal_message);
  if (r.interrupted) {
    fail.push_back("the campaign was interrupted after " +
                   std::to_string(r.cases) +
                   " case(s): no verdict on the rest");
  }
  if (!d.failures.empty()) {
    fail.push_back("the decode report found " +
                   std::to_string(d.failures.size()) + " failure(s)");
  }
  if (d.interrupted) fail.push_back("the decode report was interrupted");
  if (r.cases == 0) unchecked.push_back("the campaign ran 0 cases");
  for (const BackendSummary& b : r.backends) {
    const bool named =
        std::find(ctx.named_backends.begin(), ctx.named_backends.end(),
                  b.name) != ctx.named_backends.end();
    if (r.cases > 0 && named && b.cases == 0) {
      unchecked.push_back("backend " + b.name + " skipped all " +
                          std::to_string(b.skipped) + " case(s)");
    }
  }
  if (d.ran && d.failures.empty() && d.compared == 0) {
    unchecked.push_back("the decode report compared nothing");
  }
  if (why != nullptr) {
    why->insert(why->end(), fail.begin(), fail.end());
    for (const std::string& u : unchecked) {
      why->push_back("NOTHING CHECKED: " + u);
    }
  }
  if (!fail.empty()) return kExitFinding;
  return unchecked.empty() ? kExitPass : kExitNothingChecked;
}

}  // namespace attnkit::harness
