#include "bench/run_data.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "runtime/stats.h"

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

std::optional<double> NsPerUnit(std::string_view unit) {
  if (unit == "ns") return 1.0;
  if (unit == "us") return 1e3;
  if (unit == "ms") return 1e6;
  if (unit == "s") return 1e9;
  return std::nullopt;
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

// Where a number literal beyond the range of a double is (nlohmann rejects
// it without saying where): its line, column, value and the key before it.
std::optional<std::string> FindOutOfRangeNumber(std::string_view text) {
  bool in_string = false;
  size_t string_start = 0, line = 1, line_start = 0;
  std::string last_key;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      line_start = i + 1;
    }
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
        size_t j = i + 1;
        while (j < text.size() &&
               std::isspace(static_cast<unsigned char>(text[j])) != 0) {
          ++j;
        }
        if (j < text.size() && text[j] == ':') {
          last_key =
              std::string(text.substr(string_start + 1, i - string_start - 1));
        }
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      string_start = i;
      continue;
    }
    if (c != '-' && std::isdigit(static_cast<unsigned char>(c)) == 0) continue;
    size_t j = i;
    while (j < text.size() &&
           std::strchr("+-.eE0123456789", text[j]) != nullptr) {
      ++j;
    }
    const std::string token(text.substr(i, j - i));
    const double v = std::strtod(token.c_str(), nullptr);
    if (std::isinf(v)) {
      std::string shown =
          token.size() > 40 ? token.substr(0, 37) + "..." : token;
      return "line " + std::to_string(line) + ", column " +
             std::to_string(i - line_start + 1) + ": " +
             (last_key.empty() ? "a value" : "field '" + last_key + "'") +
             " is " + shown + ", beyond the range of a double";
    }
    i = j - 1;
  }
  return std::nullopt;
}

}  // namespace

bool IsExactMetric(std::string_view metric) {
  return std::find(std::begin(kExactMetrics), std::end(kExactMetrics),
                   metric) != std::end(kExactMetrics);
}

namespace {

// A JSON value as the error message shows it: its JSON text (strings quoted,
// control characters escaped by the dump), at most 80 characters.
std::string Shown(const json& v) {
  std::string text =
      v.dump(-1, ' ', /*ensure_ascii=*/false, json::error_handler_t::replace);
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

const char* TypeName(const json& v) {
  return v.is_number()    ? "a number"
         : v.is_string()  ? "a string"
         : v.is_boolean() ? "a boolean"
         : v.is_null()    ? "null"
         : v.is_array()   ? "an array"
                          : "an object";
}

// Reads the fields of one document; every message starts with where (the
// file, and the benchmark's index and name) and names the field and value.
class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  Status Error(const std::string& where, const std::string& what) const {
    return Status::InvalidArgument("benchmark json: " + source_ + ": " + where +
                                   ": " + what);
  }
  Status BadField(const std::string& where, std::string_view field,
                  const json& v, std::string_view expected) const {
    return Error(where, "field '" + std::string(field) + "' is " + Shown(v) +
                            " (" + TypeName(v) + "), expected " +
                            std::string(expected));
  }
  // A string field: absent -> `fallback`; present and not a string -> error.
  StatusOr<std::string> String(const json& obj, const std::string& where,
                               std::string_view field,
                               std::string_view fallback) const {
    auto it = obj.find(field);
    if (it == obj.end()) return std::string(fallback);
    if (!it->is_string()) return BadField(where, field, *it, "a string");
    return it->get<std::string>();
  }
  StatusOr<bool> Bool(const json& obj, const std::string& where,
                      std::string_view field, bool fallback) const {
    auto it = obj.find(field);
    if (it == obj.end()) return fallback;
    if (!it->is_boolean()) return BadField(where, field, *it, "true or false");
    return it->get<bool>();
  }
  // A finite number >= 0 (`null`, Google Benchmark's NaN or Infinity: absent
  // when `null_ok`).
  StatusOr<std::optional<double>> Number(const json& obj,
                                         const std::string& where,
                                         std::string_view field,
                                         bool null_ok) const {
    auto it = obj.find(field);
    if (it == obj.end() || (null_ok && it->is_null())) {
      return std::optional<double>();
    }
    if (!it->is_number()) return BadField(where, field, *it, "a number");
    const double v = it->get<double>();
    if (!std::isfinite(v) || v < 0) {
      return BadField(where, field, *it, "a finite number >= 0");
    }
    return std::optional<double>(v);
  }

 private:
  std::string source_;
};

StatusOr<RunData> ParseDocument(std::string_view text,
                                const std::string& source) {
  const Reader rd(source);
  json doc;
  try {
    doc = json::parse(ReplaceNonFiniteTokens(text));
  } catch (const json::exception& e) {
    // "[json.exception.parse_error.101] parse error at line 3, column 7:
    // syntax error ...": keep what follows the id.
    std::string what = e.what();
    if (const size_t at = what.find("] "); at != std::string::npos) {
      what = what.substr(at + 2);
    }
    if (text.empty()) what = "empty file";
    if (auto where = FindOutOfRangeNumber(text)) what = *where;
    return Status::InvalidArgument("benchmark json: " + source +
                                   " is not JSON (" + what + ")");
  }
  if (!doc.is_object()) {
    return Status::InvalidArgument("benchmark json: " + source +
                                   ": the document is " + TypeName(doc) +
                                   ", expected an object with a "
                                   "'benchmarks' array");
  }
  auto benchmarks = doc.find("benchmarks");
  if (benchmarks == doc.end()) {
    return Status::InvalidArgument("benchmark json: " + source +
                                   " has no 'benchmarks' array");
  }
  if (!benchmarks->is_array()) {
    return rd.BadField("top level", "benchmarks", *benchmarks, "an array");
  }
  RunData run;
  run.info.source = source;
  json ctx = json::object();
  if (auto c = doc.find("context"); c != doc.end()) {
    if (!c->is_object())
      return rd.BadField("top level", "context", *c, "an object");
    ctx = *c;
  }
  run.info.context_json = ctx.dump();
  // The context fields the store keys on: strings, as Google Benchmark and
  // attnkit_bench write them; empty means absent.
  auto context_string = [&](const char* key,
                            const char* fallback) -> StatusOr<std::string> {
    ATTNKIT_ASSIGN_OR_RETURN(std::string v,
                             rd.String(ctx, "context", key, fallback));
    return v.empty() ? std::string(fallback) : v;
  };
  ATTNKIT_ASSIGN_OR_RETURN(run.info.sha, context_string("git_sha", "unknown"));
  ATTNKIT_ASSIGN_OR_RETURN(const std::string dirty,
                           context_string("git_dirty", "0"));
  run.info.dirty = dirty == "1";
  ATTNKIT_ASSIGN_OR_RETURN(run.info.date, context_string("date", ""));
  ATTNKIT_ASSIGN_OR_RETURN(run.info.host,
                           context_string("host_name", "unknown"));
  ATTNKIT_ASSIGN_OR_RETURN(const std::string quick,
                           context_string("attnkit_quick", "0"));
  run.info.quick = quick == "1";

  size_t iterations = 0;
  for (size_t i = 0; i < benchmarks->size(); ++i) {
    const json& e = (*benchmarks)[i];
    std::string where = "benchmarks[" + std::to_string(i) + "]";
    if (!e.is_object()) {
      return rd.Error(where, "is " + Shown(e) + " (" + TypeName(e) +
                                 "), expected an object");
    }
    // The name first, so every later message can carry it.
    ATTNKIT_ASSIGN_OR_RETURN(const std::string plain,
                             rd.String(e, where, "name", ""));
    ATTNKIT_ASSIGN_OR_RETURN(const std::string name,
                             rd.String(e, where, "run_name", plain));
    if (name.empty()) {
      return rd.Error(where, "has no 'run_name' or 'name'");
    }
    where += " '" + name + "'";
    ATTNKIT_ASSIGN_OR_RETURN(const std::string run_type,
                             rd.String(e, where, "run_type", "iteration"));
    if (run_type == "aggregate") continue;
    if (run_type != "iteration") {
      return rd.BadField(where, "run_type", e["run_type"],
                         "\"iteration\" or \"aggregate\"");
    }
    ++iterations;
    BenchmarkSamples& s = run.benchmarks[name];
    ATTNKIT_ASSIGN_OR_RETURN(const bool failed,
                             rd.Bool(e, where, "error_occurred", false));
    if (failed) {
      ATTNKIT_ASSIGN_OR_RETURN(s.error,
                               rd.String(e, where, "error_message", "error"));
      if (s.error.empty()) s.error = "error";
      continue;
    }
    ATTNKIT_ASSIGN_OR_RETURN(const std::string unit,
                             rd.String(e, where, "time_unit", "ns"));
    const std::optional<double> ns = NsPerUnit(unit);
    if (!ns) {
      return rd.BadField(where, "time_unit", e["time_unit"],
                         "one of ns, us, ms, s");
    }
    ATTNKIT_ASSIGN_OR_RETURN(const std::optional<double> real,
                             rd.Number(e, where, "real_time", false));
    if (!real) return rd.Error(where, "has no numeric real_time");
    ATTNKIT_ASSIGN_OR_RETURN(const std::optional<double> cpu,
                             rd.Number(e, where, "cpu_time", true));
    s.metrics[std::string(kTimeMetric)].push_back(*real * *ns);
    if (cpu) s.metrics["cpu_time_ns"].push_back(*cpu * *ns);
    for (auto it = e.begin(); it != e.end(); ++it) {
      if (NonCounterFields().count(it.key()) != 0) continue;
      // A counter is a number (null: Google Benchmark's NaN or Infinity, no
      // sample). Other values are fields of a newer Google Benchmark -- but
      // not under the name of a gated counter, which would silently leave
      // the gate.
      if (!it->is_number() && !(IsExactMetric(it.key()) && !it->is_null())) {
        continue;
      }
      ATTNKIT_ASSIGN_OR_RETURN(const std::optional<double> v,
                               rd.Number(e, where, it.key(), true));
      if (v) s.metrics[it.key()].push_back(*v);
    }
  }
  if (iterations == 0) {
    return Status::InvalidArgument(
        "benchmark json: " + source +
        " holds no benchmark repetitions (no 'benchmarks' entry of run_type "
        "iteration; written with --benchmark_report_aggregates_only?)");
  }
  return run;
}

}  // namespace

StatusOr<RunData> ParseGoogleBenchmarkJson(std::string_view text,
                                           std::string source) {
  // Every field is checked before it is read; this is the net under that
  // (nlohmann throws on a wrong type), so no input can abort the tool.
  try {
    return ParseDocument(text, source);
  } catch (const std::exception& e) {
    return Status::InvalidArgument("benchmark json: " + source + ": " +
                                   e.what());
  }
}

StatusOr<RunData> ReadGoogleBenchmarkJsonFile(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return Status::InvalidArgument("benchmark json: " + path +
                                   " is a directory");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("benchmark json: cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) {
    return Status::InvalidArgument("benchmark json: cannot read " + path);
  }
  return ParseGoogleBenchmarkJson(ss.str(), path);
}

const std::vector<double>* FindMetric(const BenchmarkSamples& s,
                                      std::string_view metric) {
  auto it = s.metrics.find(std::string(metric));
  return it == s.metrics.end() || it->second.empty() ? nullptr : &it->second;
}

double MedianMetric(const BenchmarkSamples& s, std::string_view metric) {
  const std::vector<double>* v = FindMetric(s, metric);
  return v == nullptr ? NAN : Median(*v);
}

std::string FixedOrNa(double v, int digits) {
  if (std::isnan(v)) return "n/a";
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::string TwinShape(std::string_view name) {
  name.remove_prefix(std::min(name.size(), name.find('/') + 1));
  for (std::string_view tail : {"/real_time", "/manual_time"}) {
    if (name.size() >= tail.size() &&
        name.substr(name.size() - tail.size()) == tail) {
      name.remove_suffix(tail.size());
    }
  }
  if (const size_t at = name.find("/iterations:");
      at != std::string_view::npos) {
    name = name.substr(0, at);
  }
  return std::string(name);
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

bool GoogleBenchmarkBoolFlag(int argc, const char* const* argv,
                             std::string_view name, const char* env) {
  const std::string flag = "--" + std::string(name);
  bool on = env != nullptr && TruthyFlagValue(env);
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == flag) {
      on = true;
    } else if (a.substr(0, flag.size() + 1) == flag + "=") {
      on = TruthyFlagValue(a.substr(flag.size() + 1));
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
