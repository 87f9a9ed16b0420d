#include "bench/run_data.h"

#include <gtest/gtest.h>

#include <cmath>

#include "bench/testing_runs.h"

namespace attnkit::bench {
namespace {

// The shape of attnkit_bench's real output (Google Benchmark 1.7.1): two
// repetitions, their aggregates, a counter, an errored benchmark.
constexpr const char* kJson = R"({
  "context": {"date": "2026-11-21T05:05:34+00:00", "host_name": "vm",
              "git_sha": "ad85c6274d75ea72f1d111f4c9f0451050fc125e",
              "git_dirty": "1", "attnkit_quick": "1", "num_cpus": 2},
  "benchmarks": [
    {"name": "decode/reference/kv_len:512/real_time",
     "run_name": "decode/reference/kv_len:512/real_time",
     "run_type": "iteration", "repetitions": 2, "repetition_index": 0,
     "threads": 1, "iterations": 18, "real_time": 7.5e+02,
     "cpu_time": 7.4e+02, "time_unit": "us", "GBps": 5.5, "pct_peak": 15.4},
    {"name": "decode/reference/kv_len:512/real_time",
     "run_name": "decode/reference/kv_len:512/real_time",
     "run_type": "iteration", "repetitions": 2, "repetition_index": 1,
     "threads": 1, "iterations": 18, "real_time": 7.25e+02,
     "cpu_time": 7.2e+02, "time_unit": "us", "GBps": 5.7, "pct_peak": 15.5},
    {"name": "decode/reference/kv_len:512/real_time_mean",
     "run_name": "decode/reference/kv_len:512/real_time",
     "run_type": "aggregate", "aggregate_name": "mean", "iterations": 2,
     "real_time": 7.4e+02, "cpu_time": 7.3e+02, "time_unit": "us",
     "GBps": 5.6},
    {"name": "prefill/x/S:128/real_time", "run_name": "prefill/x/S:128/real_time",
     "run_type": "iteration", "error_occurred": true,
     "error_message": "output mismatch at [b=0,h=3,i=0,d=1]",
     "iterations": 0, "real_time": 0, "cpu_time": 0, "time_unit": "ms"}
  ]})";

TEST(RunDataTest, ParsesRepetitionsCountersContextAndErrors) {
  auto run = ParseGoogleBenchmarkJson(kJson, "a.json");
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(run->info.sha, "ad85c6274d75ea72f1d111f4c9f0451050fc125e");
  EXPECT_TRUE(run->info.dirty);
  EXPECT_TRUE(run->info.quick);
  EXPECT_EQ(run->info.host, "vm");
  EXPECT_EQ(run->info.date, "2026-11-21T05:05:34+00:00");
  EXPECT_EQ(run->info.source, "a.json");
  EXPECT_EQ(ContextValue(run->info, "host_name"), "vm");
  EXPECT_EQ(ContextValue(run->info, "num_cpus"), "?");  // not a string
  EXPECT_EQ(ContextValue(run->info, "absent", "-"), "-");
  ASSERT_EQ(run->benchmarks.size(), 2u);
  const BenchmarkSamples& d =
      run->benchmarks.at("decode/reference/kv_len:512/real_time");
  // Times in ns (time_unit us), aggregates ignored: two values, not three.
  EXPECT_EQ(d.metrics.at(std::string(kTimeMetric)),
            (std::vector<double>{7.5e5, 7.25e5}));
  EXPECT_EQ(d.metrics.at("cpu_time_ns"), (std::vector<double>{7.4e5, 7.2e5}));
  EXPECT_EQ(d.metrics.at("GBps"), (std::vector<double>{5.5, 5.7}));
  EXPECT_EQ(d.metrics.count("iterations"), 0u);
  EXPECT_EQ(d.metrics.count("repetition_index"), 0u);
  const BenchmarkSamples& e = run->benchmarks.at("prefill/x/S:128/real_time");
  EXPECT_EQ(e.error, "output mismatch at [b=0,h=3,i=0,d=1]");
  EXPECT_TRUE(e.metrics.empty());
}

// Found by `./attnkit bench --quick` once every backend's in-place decode
// step made 0 allocations: Google Benchmark writes the cv aggregate of a
// counter with mean 0 as a bare NaN (not JSON), and ingestion rejected the
// whole run.
TEST(RunDataTest, AcceptsGoogleBenchmarkNaNAndInfinityTokens) {
  auto run = ParseGoogleBenchmarkJson(R"({"benchmarks": [
    {"name": "d/x", "run_name": "d/x", "run_type": "iteration",
     "real_time": 2.0, "time_unit": "us", "allocs_per_step": 0,
     "GBps": Infinity},
    {"name": "d/x_cv", "run_name": "d/x", "run_type": "aggregate",
     "aggregate_name": "cv", "real_time": 0.1, "time_unit": "us",
     "allocs_per_step": NaN, "GBps": -Infinity,
     "label": "a: NaN, stays text"}]})",
                                      "nan.json");
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  const BenchmarkSamples& s = run->benchmarks.at("d/x");
  EXPECT_EQ(s.metrics.at("allocs_per_step"), std::vector<double>{0.0});
  EXPECT_EQ(s.metrics.count("GBps"), 0u);  // non-finite: not a sample
}

TEST(RunDataTest, RejectsMalformedInput) {
  auto r = ParseGoogleBenchmarkJson("{not json", "bad.json");
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("bad.json"), std::string::npos);
  r = ParseGoogleBenchmarkJson(R"({"context": {}})", "x.json");
  EXPECT_NE(r.status().message().find("'benchmarks'"), std::string::npos);
  r = ParseGoogleBenchmarkJson(
      R"({"benchmarks": [{"name": "a", "real_time": 1, "time_unit": "min"}]})",
      "x.json");
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find(R"('time_unit' is "min")"),
            std::string::npos);
  r = ParseGoogleBenchmarkJson(R"({"benchmarks": [{"name": "a"}]})", "x.json");
  EXPECT_NE(r.status().message().find("'a': has no numeric real_time"),
            std::string::npos);
}

// Issue 16: a field of the wrong type aborted the tool with an uncaught
// nlohmann type_error. Every field the reader reads, each with a bad value:
// a Status naming the file, the benchmark (index and name) and the field
// with its value.
TEST(RunDataTest, EveryFieldOfTheWrongTypeIsAStatusNamingFileEntryAndValue) {
  struct Case {
    const char* entry;  // the fields of benchmarks[1] after its name
    std::vector<std::string> expected;
  };
  const Case cases[] = {
      {R"("run_type": 5)", {"benchmarks[1] 'b'", "'run_type' is 5"}},
      {R"("run_type": "median")",
       {"benchmarks[1] 'b'", R"('run_type' is "median")", "iteration"}},
      {R"("run_name": 5)", {"benchmarks[1]", "'run_name' is 5"}},
      {R"("run_name": ["b"])", {"benchmarks[1]", R"('run_name' is ["b"])"}},
      {R"("time_unit": 7, "real_time": 1)",
       {"benchmarks[1] 'b'", "'time_unit' is 7"}},
      {R"("time_unit": "min", "real_time": 1)",
       {"benchmarks[1] 'b'", R"('time_unit' is "min")", "ns, us, ms, s"}},
      {R"("error_occurred": "yes")",
       {"benchmarks[1] 'b'", R"('error_occurred' is "yes")"}},
      {R"("error_occurred": true, "error_message": 3)",
       {"benchmarks[1] 'b'", "'error_message' is 3"}},
      {R"("real_time": "fast")",
       {"benchmarks[1] 'b'", R"('real_time' is "fast")"}},
      {R"("real_time": null)", {"benchmarks[1] 'b'", "'real_time' is null"}},
      {R"("real_time": -1)", {"benchmarks[1] 'b'", "'real_time' is -1"}},
      {R"("real_time": {"v": 1})",
       {"benchmarks[1] 'b'", R"('real_time' is {"v":1})"}},
      {R"("real_time": 1, "cpu_time": "x")",
       {"benchmarks[1] 'b'", R"('cpu_time' is "x")"}},
      // A gated counter of the wrong type would silently leave the gate.
      {R"("real_time": 1, "allocs_per_step": "3")",
       {"benchmarks[1] 'b'", R"('allocs_per_step' is "3")"}},
      {R"("real_time": 1, "bytes_copied_per_step": true)",
       {"benchmarks[1] 'b'", "'bytes_copied_per_step' is true"}},
      {R"("real_time": 1, "GBps": -2.5)",
       {"benchmarks[1] 'b'", "'GBps' is -2.5"}},
      {R"("real_time": 1e400)",
       {"line 3", "field 'real_time' is 1e400", "beyond the range"}},
      {R"("real_time": 1, "GBps": -1e999)",
       {"line 3", "field 'GBps' is -1e999"}},
  };
  for (const Case& c : cases) {
    const std::string text = std::string(R"({"benchmarks": [
  {"name": "a", "real_time": 1},
  {"name": "b", )") + c.entry +
                             "}]}";
    StatusOr<RunData> r = ParseGoogleBenchmarkJson(text, "hostile.json");
    ASSERT_FALSE(r.ok()) << c.entry;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.entry;
    const std::string m(r.status().message());
    EXPECT_NE(m.find("hostile.json"), std::string::npos) << m;
    for (const std::string& e : c.expected) {
      EXPECT_NE(m.find(e), std::string::npos) << c.entry << "\n  " << m;
    }
  }
}

TEST(RunDataTest, WrongShapesAndContextFieldsAreStatuses) {
  const std::pair<const char*, std::vector<std::string>> cases[] = {
      {"[]", {"the document is an array"}},
      {"5", {"the document is a number"}},
      {"null", {"the document is null"}},
      {R"("benchmarks")", {"the document is a string"}},
      {R"({"benchmarks": {}})", {"'benchmarks' is {}"}},
      {R"({"benchmarks": 3})", {"'benchmarks' is 3"}},
      {R"({"benchmarks": [5]})", {"benchmarks[0]: is 5"}},
      {R"({"benchmarks": [{"real_time": 1}]})",
       {"benchmarks[0]: has no 'run_name' or 'name'"}},
      {R"({"benchmarks": []})", {"holds no benchmark repetitions"}},
      {R"({"benchmarks": [{"name": "a_mean", "run_name": "a",
           "run_type": "aggregate", "real_time": 1}]})",
       {"holds no benchmark repetitions", "aggregates_only"}},
      {R"({"context": 5, "benchmarks": [{"name": "a", "real_time": 1}]})",
       {"'context' is 5"}},
      {R"({"context": {"date": 5},
           "benchmarks": [{"name": "a", "real_time": 1}]})",
       {"context: field 'date' is 5"}},
      {R"({"context": {"git_sha": {"x": 1}},
           "benchmarks": [{"name": "a", "real_time": 1}]})",
       {R"(context: field 'git_sha' is {"x":1})"}},
      {R"({"context": {"host_name": null},
           "benchmarks": [{"name": "a", "real_time": 1}]})",
       {"context: field 'host_name' is null"}},
      {R"({"context": {"git_dirty": 1},
           "benchmarks": [{"name": "a", "real_time": 1}]})",
       {"context: field 'git_dirty' is 1"}},
      {R"({"context": {"attnkit_quick": false},
           "benchmarks": [{"name": "a", "real_time": 1}]})",
       {"context: field 'attnkit_quick' is false"}},
      {"", {"is not JSON (empty file)"}},
  };
  for (const auto& [text, expected] : cases) {
    StatusOr<RunData> r = ParseGoogleBenchmarkJson(text, "shape.json");
    ASSERT_FALSE(r.ok()) << text;
    const std::string m(r.status().message());
    EXPECT_NE(m.find("shape.json"), std::string::npos) << m;
    for (const std::string& e : expected) {
      EXPECT_NE(m.find(e), std::string::npos) << text << "\n  " << m;
    }
  }
  // Huge numbers that a double holds are numbers; fields the reader does not
  // read may hold anything.
  auto r = ParseGoogleBenchmarkJson(
      R"({"benchmarks": [{"name": "a", "real_time": 123456789012345678901234567890,
          "iterations": 99999999999999999999999999, "threads": "x",
          "label": 7, "new_field_of_a_later_version": {"k": [1]}}]})",
      "big.json");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->benchmarks.at("a").metrics.at(std::string(kTimeMetric)),
            std::vector<double>{1.2345678901234568e29});
}

// Every prefix of a real file (a run cut short by a full disk or a killed
// benchmark) is a Status naming the file, never a crash or a partial run.
TEST(RunDataTest, EveryTruncationIsAStatus) {
  const std::string text = kJson;
  for (size_t n = 0; n < text.size(); ++n) {
    StatusOr<RunData> r =
        ParseGoogleBenchmarkJson(text.substr(0, n), "cut.json");
    ASSERT_FALSE(r.ok()) << n;
    EXPECT_NE(r.status().message().find("cut.json"), std::string::npos)
        << r.status().ToString();
  }
}

TEST(RunDataTest, ReadsABoolFlagAsGoogleBenchmarkDoes) {
  auto on = [](std::vector<const char*> args, const char* env = nullptr,
               std::string_view name = "benchmark_enable_random_interleaving") {
    args.insert(args.begin(), "attnkit_bench");
    return GoogleBenchmarkBoolFlag(static_cast<int>(args.size()), args.data(),
                                   name, env);
  };
  EXPECT_FALSE(on({}));
  EXPECT_TRUE(on({"--benchmark_enable_random_interleaving"}));
  EXPECT_TRUE(on({"--benchmark_enable_random_interleaving=true"}));
  EXPECT_TRUE(on({"--benchmark_enable_random_interleaving=1"}));
  EXPECT_FALSE(on({"--benchmark_enable_random_interleaving=false"}));
  EXPECT_FALSE(on({"--benchmark_enable_random_interleaving=OFF"}));
  EXPECT_FALSE(on({"--benchmark_enable_random_interleaving=f"}));
  // The last one wins; the environment is the default.
  EXPECT_FALSE(on({"--benchmark_enable_random_interleaving",
                   "--benchmark_enable_random_interleaving=no"}));
  EXPECT_TRUE(on({}, "yes"));
  EXPECT_FALSE(on({}, "0"));
  EXPECT_FALSE(on({"--benchmark_enable_random_interleaving=0"}, "true"));
  // Not the flag: another flag sharing its prefix.
  EXPECT_FALSE(on({"--benchmark_enable_random_interleaving_x=1"}));
  // Any flag by its name: another flag is not it.
  EXPECT_TRUE(on({"--benchmark_list_tests"}, nullptr, "benchmark_list_tests"));
  EXPECT_FALSE(on({"--benchmark_enable_random_interleaving"}, nullptr,
                  "benchmark_list_tests"));
  EXPECT_FALSE(
      on({"--benchmark_list_tests=false"}, "1", "benchmark_list_tests"));
}

TEST(RunDataTest, ExportRoundTrips) {
  testing::Plant plant;
  plant.error["decode/reference/kv_len:4096/bf16:0/batch:1/real_time"] = "bad";
  const RunData a =
      testing::SyntheticRun("abc123", "2026-01-01T00:00:00", 7, 9, plant);
  auto b = ParseGoogleBenchmarkJson(ToGoogleBenchmarkJson(a), "rt");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->info.sha, "abc123");
  EXPECT_EQ(b->info.host, "testhost");
  ASSERT_EQ(b->benchmarks.size(), a.benchmarks.size());
  for (const auto& [name, s] : a.benchmarks) {
    EXPECT_EQ(b->benchmarks.at(name).metrics, s.metrics) << name;
    EXPECT_EQ(b->benchmarks.at(name).error, s.error) << name;
  }
}

TEST(RunDataTest, MetricLookupsTellAMissingFigureFromAZero) {
  BenchmarkSamples s;
  s.metrics["GBps"] = {3.0, 1.0, 2.0};
  s.metrics["empty"] = {};
  s.metrics["zero"] = {0.0};
  ASSERT_NE(FindMetric(s, "GBps"), nullptr);
  EXPECT_EQ(FindMetric(s, "GBps")->size(), 3u);
  EXPECT_EQ(FindMetric(s, "empty"), nullptr);
  EXPECT_EQ(FindMetric(s, "absent"), nullptr);
  EXPECT_EQ(MedianMetric(s, "GBps"), 2.0);
  EXPECT_EQ(MedianMetric(s, "zero"), 0.0);
  EXPECT_TRUE(std::isnan(MedianMetric(s, "empty")));
  EXPECT_TRUE(std::isnan(MedianMetric(s, "absent")));
  EXPECT_EQ(FixedOrNa(81.44, 1), "81.4");
  EXPECT_EQ(FixedOrNa(0.0, 2), "0.00");
  EXPECT_EQ(FixedOrNa(NAN, 1), "n/a");
}

}  // namespace
}  // namespace attnkit::bench
