#include "harness/merge.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "runtime/flags.h"
#include "runtime/limits.h"
#include "runtime/parse.h"
#include "runtime/report_file.h"

namespace attnkit::harness {
namespace {

using Json = nlohmann::json;

// A number the writer may have written as null (non-finite: an infinite
// error ratio after a NaN).
double Number(const Json& j, const char* key) {
  const Json& v = j.at(key);
  return v.is_null() ? std::numeric_limits<double>::infinity()
                     : v.get<double>();
}

std::array<int64_t, 4> Index4(const Json& j, const char* key) {
  const auto v = j.at(key).get<std::vector<int64_t>>();
  if (v.size() != 4) {
    throw std::out_of_range(std::string(key) + " has " +
                            std::to_string(v.size()) + " entries, not 4");
  }
  return {v[0], v[1], v[2], v[3]};
}

// "i/n" with 0 <= i < n.
std::optional<std::pair<int64_t, int64_t>> ParseShard(std::string_view s) {
  const size_t slash = s.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  auto i = ParseInt64(s.substr(0, slash));
  auto n = ParseInt64(s.substr(slash + 1));
  if (!i || !n || *n < 1 || *i < 0 || *i >= *n) return std::nullopt;
  return std::pair{*i, *n};
}

FailureReport ParseFailure(const Json& j) {
  FailureReport f;
  f.backend = j.at("backend").get<std::string>();
  const std::string outcome = j.at("outcome").get<std::string>();
  const auto o = kOutcomeNames.Parse(outcome);
  if (!o) throw std::out_of_range("outcome=" + outcome + " is not known");
  for (auto [key, target] : {std::pair{"case", &f.shrunk},
                             std::pair{"original_case", &f.original}}) {
    auto c = ParseCase(j.at(key).get<std::string>());
    if (!c.ok())
      throw std::out_of_range(std::string(key) + ": " + c.status().message());
    *target = std::move(*c);
  }
  f.was_shrunk = j.at("shrunk").get<bool>();
  f.reproduced_alone = j.at("reproduced_alone").get<bool>();
  f.shrink_attempts = j.at("shrink_attempts").get<int>();
  f.shrink_accepted = j.at("shrink_accepted").get<int>();
  CheckResult& r = f.result;
  r.backend = f.backend;
  r.outcome = *o;
  r.step = j.at("step").get<int64_t>();
  r.message = j.at("message").get<std::string>();
  // The failing call's problem: a decode loop's step is a function of the
  // case (DecodeStepProblem), a plain case is its problem.
  r.problem = r.step >= 0 && f.shrunk.decode_steps > 0
                  ? DecodeStepProblem(f.shrunk, r.step)
                  : f.shrunk.problem;
  ErrorStats& e = r.error;
  e.mismatched = j.at("mismatched").get<int64_t>();
  e.count = j.at("compared").get<int64_t>();
  e.nonfinite = j.at("nonfinite").get<int64_t>();
  e.max_abs = Number(j, "max_abs_err");
  e.max_abs_index = Index4(j, "max_abs_index");
  e.max_rel = Number(j, "max_rel_err");
  e.max_rel_index = Index4(j, "max_rel_index");
  e.mean_abs = Number(j, "mean_abs_err");
  e.max_abs_got = Number(j, "max_abs_got");
  e.max_abs_want = Number(j, "max_abs_want");
  r.bounds.max_abs = Number(j, "bound_max_abs");
  r.bounds.mean_abs = Number(j, "bound_mean_abs");
  r.ratio = ErrorRatio(e, r.bounds);
  return f;
}

Status Mismatch(const CampaignReport& a, const CampaignReport& b,
                const std::string& what) {
  return Status::InvalidArgument(b.source + " and " + a.source +
                                 " are not shards of one campaign: " + what);
}

// `into` += the names of `from` it lacks, in order.
void Union(std::vector<std::string>& into,
           const std::vector<std::string>& from) {
  for (const std::string& s : from) {
    if (std::find(into.begin(), into.end(), s) == into.end()) {
      into.push_back(s);
    }
  }
}

}  // namespace

StatusOr<CampaignReport> ParseCheckJson(std::string_view text,
                                        std::string_view source) {
  CampaignReport out;
  out.source = std::string(source);
  auto bad = [&](const std::string& m) {
    return Status::InvalidArgument(out.source + ": " + m);
  };
  const Json doc = Json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    return bad("not a JSON object (a check's --json report?)");
  }
  try {
    const int version = doc.at("schema_version").get<int>();
    if (version != kJsonSchemaVersion) {
      return bad("schema_version=" + std::to_string(version) +
                 ", this attnkit reads " + std::to_string(kJsonSchemaVersion) +
                 " (run the shards with the same attnkit)");
    }
    if (doc.at("tool").get<std::string>() != "attnkit check") {
      return bad("tool=" + doc.at("tool").get<std::string>() +
                 " is not 'attnkit check'");
    }
    JsonContext& ctx = out.context;
    ctx.tier = doc.at("tier").get<std::string>();
    ctx.seed = doc.at("seed").get<uint64_t>();
    ctx.shard = doc.at("shard").get<std::string>();
    if (ctx.shard.starts_with("all/")) {  // a merged report
      const auto n = ParseInt64(std::string_view(ctx.shard).substr(4));
      if (!n || *n < 1) return bad("shard=" + ctx.shard + " is not all/n");
      out.shard_index = -1;
      out.shard_count = *n;
    } else {
      const auto shard = ParseShard(ctx.shard);
      if (!shard) return bad("shard=" + ctx.shard + " is not i/n with i < n");
      out.shard_index = shard->first;
      out.shard_count = shard->second;
    }
    out.plugins = doc.at("plugins").get<std::vector<std::string>>();
    ctx.extra_flags = doc.at("repro_flags").get<std::string>();
    ctx.named_backends =
        doc.at("named_backends").get<std::vector<std::string>>();
    const Json& sum = doc.at("summary");
    CampaignResult& r = out.result;
    r.cases = sum.at("cases").get<int64_t>();
    r.failures = sum.at("failures").get<int64_t>();
    r.seconds = Number(sum, "seconds");
    r.cpu_seconds = Number(sum, "cpu_seconds");
    r.interrupted = sum.at("interrupted").get<bool>();
    if (!sum.at("fatal").is_null()) {
      r.fatal = true;
      r.fatal_message = sum.at("fatal").get<std::string>();
    }
    for (const Json& b : doc.at("backends")) {
      BackendSummary s;
      s.name = b.at("name").get<std::string>();
      s.cases = b.at("cases").get<int64_t>();
      s.failures = b.at("failures").get<int64_t>();
      s.skipped = b.at("skipped").get<int64_t>();
      s.worst_ratio = Number(b, "worst_ratio");
      s.worst_case = b.at("worst_case").get<std::string>();
      s.seconds = Number(b, "seconds");
      s.deaths = b.at("deaths").get<int64_t>();
      if (!b.at("quarantined").is_null()) {
        s.quarantined = b.at("quarantined").get<std::string>();
      }
      s.not_run = b.at("not_run").get<int64_t>();
      r.backends.push_back(std::move(s));
    }
    for (const Json& f : doc.at("failures")) {
      r.reports.push_back(ParseFailure(f));
    }
    const Json& d = doc.at("decode");
    ctx.decode.ran = d.at("ran").get<bool>();
    ctx.decode.interrupted = d.at("interrupted").get<bool>();
    ctx.decode.compared = d.at("compared").get<int64_t>();
    ctx.decode.contract_checked = d.at("contract_checked").get<int64_t>();
    ctx.decode.failures = d.at("failures").get<std::vector<std::string>>();
    ctx.decode.skipped = d.at("skipped").get<std::vector<std::string>>();
  } catch (const std::exception& e) {
    return bad(e.what());
  }
  out.Bind();
  return out;
}

StatusOr<CampaignReport> MergeShards(std::vector<CampaignReport> shards) {
  if (shards.empty()) {
    return Status::InvalidArgument("no shard reports to merge");
  }
  const CampaignReport& first = shards.front();
  const int64_t n = first.shard_count;
  std::vector<const CampaignReport*> by_index(static_cast<size_t>(n), nullptr);
  for (const CampaignReport& s : shards) {
    const JsonContext &a = first.context, &b = s.context;
    if (s.shard_count != n) {
      return Mismatch(first, s,
                      "shard=" + b.shard + " but shard=" + a.shard +
                          " (different shard counts)");
    }
    if (b.tier != a.tier) {
      return Mismatch(first, s, "tier=" + b.tier + " but tier=" + a.tier);
    }
    if (b.seed != a.seed) {
      return Mismatch(first, s,
                      "seed=" + std::to_string(b.seed) +
                          " but seed=" + std::to_string(a.seed));
    }
    if (s.plugins != first.plugins || b.extra_flags != a.extra_flags) {
      return Mismatch(first, s, "different --plugin or isolation flags");
    }
    std::vector<std::string> names, first_names;
    for (const BackendSummary& x : s.result.backends) names.push_back(x.name);
    for (const BackendSummary& x : first.result.backends) {
      first_names.push_back(x.name);
    }
    if (names != first_names) {
      return Mismatch(first, s, "different backends");
    }
    if (s.shard_index < 0) {
      return Status::InvalidArgument(s.source + " is a merged report (shard=" +
                                     b.shard + "), not one shard");
    }
    const CampaignReport*& slot = by_index[static_cast<size_t>(s.shard_index)];
    if (slot != nullptr) {
      return Status::InvalidArgument("shard " + b.shard + " is given twice: " +
                                     slot->source + " and " + s.source);
    }
    slot = &s;
  }
  std::string missing;
  for (int64_t i = 0; i < n; ++i) {
    if (by_index[static_cast<size_t>(i)] == nullptr) {
      missing += (missing.empty() ? "" : ", ") + std::to_string(i) + "/" +
                 std::to_string(n);
    }
  }
  if (!missing.empty()) {
    return Status::InvalidArgument("missing shard(s) " + missing + " of " +
                                   std::to_string(n) + " (" +
                                   std::to_string(shards.size()) + " given)");
  }

  CampaignReport out;
  out.source = "merged";
  out.plugins = first.plugins;
  out.shard_count = n;
  JsonContext& ctx = out.context;
  ctx.tier = first.context.tier;
  ctx.seed = first.context.seed;
  ctx.shard = "all/" + std::to_string(n);
  ctx.extra_flags = first.context.extra_flags;
  ctx.decode.ran = true;
  CampaignResult& r = out.result;
  r.backends = first.result.backends;
  for (BackendSummary& b : r.backends) {
    BackendSummary empty;
    empty.name = b.name;
    b = std::move(empty);
  }
  for (const CampaignReport* s : by_index) {
    const CampaignResult& x = s->result;
    r.cases += x.cases;
    r.failures += x.failures;
    r.seconds += x.seconds;
    r.cpu_seconds += x.cpu_seconds;
    r.interrupted = r.interrupted || x.interrupted;
    if (x.fatal && !r.fatal) {
      r.fatal = true;
      r.fatal_message = s->source + ": " + x.fatal_message;
    }
    for (size_t i = 0; i < r.backends.size(); ++i) {
      BackendSummary& m = r.backends[i];
      const BackendSummary& b = x.backends[i];
      m.cases += b.cases;
      m.failures += b.failures;
      m.skipped += b.skipped;
      m.seconds += b.seconds;
      m.deaths += b.deaths;
      m.not_run += b.not_run;
      if (b.worst_ratio > m.worst_ratio || m.worst_case.empty()) {
        m.worst_ratio = b.worst_ratio;
        m.worst_case = b.worst_case;
      }
      if (!b.quarantined.empty()) {
        m.quarantined += (m.quarantined.empty() ? "" : "; ") +
                         ("shard " + s->context.shard + ": " + b.quarantined);
      }
    }
    r.reports.insert(r.reports.end(), x.reports.begin(), x.reports.end());
    Union(ctx.named_backends, s->context.named_backends);
    const DecodeVerdict& d = s->context.decode;
    ctx.decode.ran = ctx.decode.ran && d.ran;
    ctx.decode.interrupted = ctx.decode.interrupted || d.interrupted;
    ctx.decode.compared = std::max(ctx.decode.compared, d.compared);
    ctx.decode.contract_checked =
        std::max(ctx.decode.contract_checked, d.contract_checked);
    Union(ctx.decode.failures, d.failures);
    Union(ctx.decode.skipped, d.skipped);
  }
  // As the unsharded run finds them: by case index, then backend order.
  std::map<std::string, size_t> order;
  for (size_t i = 0; i < r.backends.size(); ++i) order[r.backends[i].name] = i;
  std::stable_sort(r.reports.begin(), r.reports.end(),
                   [&](const FailureReport& a, const FailureReport& b) {
                     if (a.original.index != b.original.index) {
                       return a.original.index < b.original.index;
                     }
                     return order[a.backend] < order[b.backend];
                   });
  out.Bind();
  return out;
}

int ReportMain(int argc, char** argv) {
  if (argc < 1 || std::string_view(argv[0]) != "merge") {
    std::fprintf(stderr,
                 "report: expected 'merge' (report merge FILE... [--json F] "
                 "[--junit F])\n");
    return kExitUsage;
  }
  std::vector<std::string> files;
  std::string json_path, junit_path;
  FlagParser flags(
      "attnkit report merge SHARD.json... [--json FILE] [--junit FILE]",
      "Merges the --json reports of `check --shard i/n` (one per shard, every\n"
      "shard 0..n-1 exactly once, one campaign: same tier, seed, backends\n"
      "and plug-ins) into one verdict: every failure with its reproducer, the\n"
      "summary, and the exit status the unsharded run would have.");
  flags.Positional(&files)
      .NonEmptyString("--json", &json_path, "FILE",
                      "write the merged report as the check's JSON")
      .NonEmptyString("--junit", &junit_path, "FILE",
                      "write the merged report as JUnit XML")
      .Epilogue(
          "Exit status: 0 all passed, 1 a failure (or a shard interrupted or\n"
          "in error: no verdict is no pass), 2 bad usage or shards that are\n"
          "not one campaign (missing, twice, mismatched), 4 nothing "
          "checked.\n");
  if (Status s = flags.Parse(argc - 1, argv + 1); !s.ok()) {
    std::fprintf(stderr, "report merge: %s\n", s.message().c_str());
    return kExitUsage;
  }
  if (flags.help()) {
    std::printf("%s", flags.Usage().c_str());
    return kExitPass;
  }
  if (files.empty()) {
    std::fprintf(stderr, "report merge: no shard reports given\n");
    return kExitUsage;
  }
  std::optional<ReportFile> json, junit;
  for (auto [path, flag, file] : {std::tuple{&json_path, "--json", &json},
                                  std::tuple{&junit_path, "--junit", &junit}}) {
    if (path->empty()) continue;
    auto opened = ReportFile::Open(*path, flag);
    if (!opened.ok()) {
      std::fprintf(stderr, "report merge: %s\n",
                   opened.status().message().c_str());
      return kExitUsage;
    }
    file->emplace(std::move(*opened));
  }
  std::vector<CampaignReport> shards;
  for (const std::string& path : files) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    if (!in) {
      std::fprintf(stderr, "report merge: %s: cannot read it\n", path.c_str());
      return kExitUsage;
    }
    auto parsed = ParseCheckJson(text.str(), path);
    if (!parsed.ok()) {
      std::fprintf(stderr, "report merge: %s\n",
                   parsed.status().message().c_str());
      return kExitUsage;
    }
    shards.push_back(std::move(*parsed));
    shards.back().Bind();
  }
  auto merged = MergeShards(std::move(shards));
  if (!merged.ok()) {
    std::fprintf(stderr, "report merge: %s\n",
                 merged.status().message().c_str());
    return kExitUsage;
  }
  const CampaignReport& m = *merged;
  std::printf("report merge: tier %s, seed %llu, %lld shard(s)\n",
              m.context.tier.c_str(),
              static_cast<unsigned long long>(m.context.seed),
              static_cast<long long>(m.shard_count));
  for (const FailureReport& f : m.result.reports) {
    std::printf("%s\n",
                FormatFailure(f, m.plugins, m.context.extra_flags).c_str());
  }
  std::printf("%s", FormatSummary(m.result).c_str());
  for (const std::string& f : m.context.decode.failures) {
    std::printf("decode: FAIL %s\n", f.c_str());
  }
  for (auto [file, text] :
       {std::pair{&json, CampaignJson(m.result, m.context)},
        std::pair{&junit, CampaignJunit(m.result, m.context)}}) {
    if (!*file) continue;
    if (Status s = (*file)->Commit(text); !s.ok()) {
      std::fprintf(stderr, "report merge: %s\n", s.message().c_str());
      return kExitUsage;
    }
  }
  std::vector<std::string> why;
  const int verdict = CheckVerdict(m.result, m.context, &why);
  for (const std::string& w : why) std::printf("report merge: %s\n", w.c_str());
  if (verdict == kExitPass) {
    std::printf("report merge: PASS (%lld cases over %lld shards)\n",
                static_cast<long long>(m.result.cases),
                static_cast<long long>(m.shard_count));
  }
  return verdict;
}

}  // namespace attnkit::harness
