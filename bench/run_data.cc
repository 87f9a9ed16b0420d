#include "bench/run_data.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace attnkit::bench {
namespace {

using nlohmann::json;

// Fields of a Google Benchmark entry that are not user counters.
const std::set<std::string, std::less<>>& NonCounterFields() {
  static const std::set<std::string, std::less<>> f = {
      "name",
      "family_index",
      "per_family_instance_index",
      "run_name",
      "run_type",
      "repetitions",
      "repetition_index",
      "threads",
      "iterations",
      "real_time",
      "cpu_time",
      "time_unit",
      "aggregate_name",
      "aggregate_unit",
      "label",
      "error_occurred",
      "error_message",
      "big_o",
      "rms",
      "complexity"};
  return f;
}

StatusOr<double> NsPerUnit(const std::string& unit) {
  if (unit == "ns") return 1.0;
  if (unit == "us") return 1e3;
  if (unit == "ms") return 1e6;
  if (unit == "s") return 1e9;
  return Status::InvalidArgument("benchmark json: time_unit='" + unit +
                                 "' is not one of ns, us, ms, s");
}

std::string ContextString(const json& ctx, const char* key,
                          const char* fallback) {
  auto it = ctx.find(key);
  if (it == ctx.end() || !it->is_string() || it->get<std::string>().empty()) {
    return fallback;
  }
  return it->get<std::string>();
}

// Google Benchmark writes non-finite doubles as bare NaN / Infinity /
// -Infinity (e.g. the cv aggregate of a counter whose mean is 0), which is
// not JSON. Outside strings they become null, which ingestion skips.
std::string ReplaceNonFiniteTokens(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) {
        out += text[++i];
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') in_string = true;
    bool replaced = false;
    for (std::string_view token : {"-Infinity", "Infinity", "NaN"}) {
      if (text.substr(i, token.size()) == token) {
        out += "null";
        i += token.size() - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += c;
  }
  return out;
}

}  // namespace

bool IsExactMetric(std::string_view metric) {
  return std::find(std::begin(kExactMetrics), std::end(kExactMetrics),
                   metric) != std::end(kExactMetrics);
}

StatusOr<RunData> ParseGoogleBenchmarkJson(std::string_view text,
                                           std::string source) {
  json doc = json::parse(ReplaceNonFiniteTokens(text), nullptr,
                         /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return Status::InvalidArgument("benchmark json: " + source +
                                   " is not a JSON object");
  }
  if (!doc.contains("benchmarks") || !doc["benchmarks"].is_array()) {
    return Status::InvalidArgument("benchmark json: " + source +
                                   " has no 'benchmarks' array");
  }
  RunData run;
  run.info.source = std::move(source);
  const json ctx = doc.value("context", json::object());
  run.info.context_json = ctx.dump();
  run.info.sha = ContextString(ctx, "git_sha", "unknown");
  run.info.dirty = ContextString(ctx, "git_dirty", "0") == "1";
  run.info.date = ContextString(ctx, "date", "");
  run.info.host = ContextString(ctx, "host_name", "unknown");
  run.info.quick = ContextString(ctx, "attnkit_quick", "0") == "1";

  for (const json& e : doc["benchmarks"]) {
    if (!e.is_object()) {
      return Status::InvalidArgument(
          "benchmark json: an entry of "
          "'benchmarks' is not an object");
    }
    if (e.value("run_type", "iteration") != "iteration") continue;
    std::string name = e.value("run_name", e.value("name", ""));
    if (name.empty()) {
      return Status::InvalidArgument("benchmark json: an entry has no name");
    }
    BenchmarkSamples& s = run.benchmarks[name];
    if (e.value("error_occurred", false)) {
      s.error = e.value("error_message", "error");
      continue;
    }
    if (!e.contains("real_time") || !e["real_time"].is_number()) {
      return Status::InvalidArgument("benchmark json: entry '" + name +
                                     "' has no numeric real_time");
    }
    ATTNKIT_ASSIGN_OR_RETURN(const double ns,
                             NsPerUnit(e.value("time_unit", "ns")));
    s.metrics[std::string(kTimeMetric)].push_back(e["real_time"].get<double>() *
                                                  ns);
    if (e.contains("cpu_time") && e["cpu_time"].is_number()) {
      s.metrics["cpu_time_ns"].push_back(e["cpu_time"].get<double>() * ns);
    }
    for (auto it = e.begin(); it != e.end(); ++it) {
      if (NonCounterFields().count(it.key()) != 0 || !it->is_number()) {
        continue;
      }
      s.metrics[it.key()].push_back(it->get<double>());
    }
  }
  return run;
}

StatusOr<RunData> ReadGoogleBenchmarkJsonFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("benchmark json: cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseGoogleBenchmarkJson(ss.str(), path);
}

std::string ContextValue(const RunInfo& info, std::string_view key,
                         std::string_view fallback) {
  const json ctx = json::parse(info.context_json, nullptr, false);
  if (!ctx.is_object()) return std::string(fallback);
  return ContextString(ctx, std::string(key).c_str(),
                       std::string(fallback).c_str());
}

namespace {

// Google Benchmark's IsTruthyFlagValue.
bool TruthyFlagValue(std::string_view v) {
  if (v.size() == 1) {
    const char c = v[0];
    return std::isalnum(static_cast<unsigned char>(c)) != 0 && c != '0' &&
           c != 'f' && c != 'F' && c != 'n' && c != 'N';
  }
  if (v.empty()) return true;
  std::string lower(v);
  for (char& c : lower) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return lower != "false" && lower != "no" && lower != "off";
}

}  // namespace

bool RandomInterleavingRequested(int argc, const char* const* argv,
                                 const char* env) {
  constexpr std::string_view kFlag = "--benchmark_enable_random_interleaving";
  bool on = env != nullptr && TruthyFlagValue(env);
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == kFlag) {
      on = true;
    } else if (a.substr(0, kFlag.size() + 1) == std::string(kFlag) + "=") {
      on = TruthyFlagValue(a.substr(kFlag.size() + 1));
    }
  }
  return on;
}

std::string ToGoogleBenchmarkJson(const RunData& run) {
  json ctx = json::object();
  if (!run.info.context_json.empty()) {
    json parsed = json::parse(run.info.context_json, nullptr, false);
    if (parsed.is_object()) ctx = parsed;
  }
  ctx["git_sha"] = run.info.sha;
  ctx["git_dirty"] = run.info.dirty ? "1" : "0";
  ctx["date"] = run.info.date;
  ctx["host_name"] = run.info.host;
  ctx["attnkit_quick"] = run.info.quick ? "1" : "0";
  json benchmarks = json::array();
  for (const auto& [name, s] : run.benchmarks) {
    if (!s.error.empty()) {
      benchmarks.push_back({{"name", name},
                            {"run_name", name},
                            {"run_type", "iteration"},
                            {"error_occurred", true},
                            {"error_message", s.error}});
      continue;
    }
    size_t reps = 0;
    for (const auto& [metric, values] : s.metrics) {
      reps = std::max(reps, values.size());
    }
    for (size_t r = 0; r < reps; ++r) {
      json e = {{"name", name},
                {"run_name", name},
                {"run_type", "iteration"},
                {"repetition_index", r},
                {"time_unit", "ns"}};
      for (const auto& [metric, values] : s.metrics) {
        if (r >= values.size()) continue;
        if (metric == kTimeMetric) {
          e["real_time"] = values[r];
        } else if (metric == "cpu_time_ns") {
          e["cpu_time"] = values[r];
        } else {
          e[metric] = values[r];
        }
      }
      benchmarks.push_back(std::move(e));
    }
  }
  return json{{"context", ctx}, {"benchmarks", benchmarks}}.dump(1);
}

}  // namespace attnkit::bench
