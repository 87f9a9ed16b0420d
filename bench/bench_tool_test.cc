// End to end through the command line the gate runs as: JSON files in,
// exit status out (0 pass, 1 regression, 2 bad input).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "bench/testing_runs.h"

namespace attnkit::bench {
namespace {

namespace fs = std::filesystem;

class BenchToolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("attnkit_bench_tool_test_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, const RunData& run) {
    return WriteText(name, ToGoogleBenchmarkJson(run));
  }
  std::string WriteText(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }
  // Runs the tool with a private store; returns its exit status, output in
  // *out.
  int Tool(const std::string& args, std::string* out = nullptr) {
    const std::string cmd = std::string(ATTNKIT_BENCH_TOOL) + " " + args +
                            " --db " + (dir_ / "h.sqlite").string() + " 2>&1";
    FILE* f = popen(cmd.c_str(), "r");
    std::string text;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
    const int status = pclose(f);
    if (out != nullptr) *out = text;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  fs::path dir_;
};

TEST_F(BenchToolTest, CompareExitStatusIsTheGate) {
  testing::Plant slow, alloc;
  slow.slowdown["prefill/reference/S:128/d:64/causal:0/hkv:8/real_time"] = 1.2;
  alloc.extra_alloc["decode_step/reference/len:512/inplace:1/real_time"] = 1;
  const std::string base =
      Write("base.json", testing::SyntheticRun("aaaa0001", "2026-01-01", 1));
  const std::string rerun =
      Write("rerun.json", testing::SyntheticRun("aaaa0002", "2026-01-02", 2));
  const std::string slower = Write(
      "slow.json", testing::SyntheticRun("aaaa0003", "2026-01-03", 3, 9, slow));
  const std::string allocs =
      Write("alloc.json",
            testing::SyntheticRun("aaaa0004", "2026-01-04", 4, 9, alloc));
  std::string out;
  EXPECT_EQ(Tool("compare " + base + " " + rerun, &out), 0) << out;
  EXPECT_EQ(Tool("compare " + base + " " + slower, &out), 1) << out;
  EXPECT_NE(out.find("REGRESSION"), std::string::npos);
  EXPECT_EQ(Tool("compare " + base + " " + allocs, &out), 1) << out;
  EXPECT_NE(out.find("allocs_per_step"), std::string::npos);

  // Through the store: ingest, then compare by spec.
  EXPECT_EQ(Tool("ingest " + base + " " + rerun + " " + slower, &out), 0)
      << out;
  EXPECT_EQ(Tool("compare latest~2 latest~1"), 0);
  EXPECT_EQ(Tool("compare aaaa0002 latest"), 1);
  EXPECT_EQ(Tool("compare latest~1 latest", &out), 1) << out;
  EXPECT_NE(out.find("gate: FAILED"), std::string::npos) << out;
  EXPECT_EQ(Tool("runs", &out), 0);
  EXPECT_NE(out.find("aaaa0003"), std::string::npos);
  EXPECT_EQ(Tool("dashboard -o " + (dir_ / "d.html").string(), &out), 0) << out;
  EXPECT_NE(out.find("3 runs of host testhost"), std::string::npos) << out;
  EXPECT_GT(fs::file_size(dir_ / "d.html"), 1000u);
}

// `summary` prints each decode benchmark against the read_bw median of the
// run it names (from a file or from the store), and says when there is none.
TEST_F(BenchToolTest, SummaryDividesDecodeByTheSameRunsReadBandwidth) {
  auto run = [](const std::string& sha, const std::string& date,
                double read_bw) {
    RunData r = testing::SyntheticRun(sha, date, 1, 5);
    testing::SetBandwidthContext(r, 2, 52);
    testing::SetDecodeBandwidth(r, testing::kSyntheticDecode,
                                {8, 9, 10, 19, 20}, 52);
    testing::AddReadBandwidth(r, 1, {5, 5, 5, 5, 5});  // not the divisor
    if (read_bw > 0) {
      testing::AddReadBandwidth(r, 2,
                                {read_bw, 0.65 * read_bw, 1.75 * read_bw,
                                 0.75 * read_bw, 1.78 * read_bw});
    }
    return r;
  };
  const std::string a = Write("a.json", run("bbbb0001", "2026-03-01", 40));
  const std::string b = Write("b.json", run("bbbb0002", "2026-03-02", 20));
  const std::string none = Write("c.json", run("bbbb0003", "2026-03-03", 0));
  std::string out;
  ASSERT_EQ(Tool("summary " + a, &out), 0) << out;
  // The per-backend line: count 1, %peak 19.23 (start of run), same-run 25.
  EXPECT_NE(out.find("reference    decode          1          19.23"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("19.23..19.23                 25.00"), std::string::npos)
      << out;
  EXPECT_NE(out.find("calibration/read_bw/threads:2/real_time median 40.00 "
                     "GB/s over 5 repetitions"),
            std::string::npos)
      << out;
  ASSERT_EQ(Tool("ingest " + a + " " + b + " " + none, &out), 0) << out;
  ASSERT_EQ(Tool("summary latest~1", &out), 0) << out;
  EXPECT_NE(out.find("19.23..19.23                 50.00"), std::string::npos)
      << out;
  ASSERT_EQ(Tool("summary bbbb0001", &out), 0) << out;
  EXPECT_NE(out.find("19.23..19.23                 25.00"), std::string::npos)
      << out;
  ASSERT_EQ(Tool("summary latest", &out), 0) << out;
  EXPECT_NE(out.find("19.23..19.23                   n/a"), std::string::npos)
      << out;
  EXPECT_NE(out.find("pct_read_bw_same_run: not available: the run has no "
                     "calibration/read_bw/threads:2"),
            std::string::npos)
      << out;
}

TEST_F(BenchToolTest, BadInputIsExitTwoWithAReason) {
  std::string out;
  EXPECT_EQ(Tool("compare latest", &out), 2);
  EXPECT_NE(out.find("expected BASE NEW"), std::string::npos) << out;
  EXPECT_EQ(Tool("compare nope.json latest", &out), 2);
  EXPECT_NE(out.find("nope.json"), std::string::npos) << out;
  EXPECT_EQ(Tool("compare latest latest", &out), 2);  // empty store
  EXPECT_NE(out.find("holds 0 runs"), std::string::npos) << out;
  EXPECT_EQ(Tool("compare a.json b.json --alpha 2", &out), 2);
  EXPECT_NE(out.find("--alpha=2"), std::string::npos) << out;
  EXPECT_EQ(Tool("frobnicate", &out), 2);
}

// Issue 16, end to end: hostile JSON is exit 2 with the file, the entry and
// the field with its value -- not an abort from an uncaught type_error.
TEST_F(BenchToolTest, HostileJsonIsExitTwoNamingFileEntryFieldAndValue) {
  const std::pair<const char*, const char*> cases[] = {
      {R"("run_type": 5, "real_time": 1)", "field 'run_type' is 5"},
      {R"("name": 5, "real_time": 1)", "field 'name' is 5"},
      {R"("time_unit": 7, "real_time": 1)", "field 'time_unit' is 7"},
      {R"("error_occurred": "yes")", R"(field 'error_occurred' is "yes")"},
      {R"("real_time": 1e400)", "field 'real_time' is 1e400"},
  };
  for (const auto& [fields, expected] : cases) {
    const std::string bad =
        WriteText("hostile.json", std::string(R"({"benchmarks": [{"name": "ok",
        "real_time": 1}, {"run_name": "b", )") +
                                      fields + "}]}");
    std::string out;
    EXPECT_EQ(Tool("compare " + bad + " " + bad, &out), 2) << out;
    EXPECT_NE(out.find("hostile.json"), std::string::npos) << out;
    EXPECT_NE(out.find(expected), std::string::npos) << out;
    EXPECT_EQ(out.find("terminate"), std::string::npos) << out;
    EXPECT_EQ(Tool("ingest " + bad, &out), 2) << out;
    EXPECT_NE(out.find(expected), std::string::npos) << out;
    EXPECT_EQ(Tool("summary " + bad, &out), 2) << out;
  }
  std::string out;
  const std::string cut = WriteText("cut.json", R"({"benchmarks": [{"na)");
  EXPECT_EQ(Tool("compare " + cut + " " + cut, &out), 2) << out;
  EXPECT_NE(out.find("cut.json is not JSON"), std::string::npos) << out;
  EXPECT_EQ(Tool("compare " + dir_.string() + "/.json x.json", &out), 2);
}

// `ingest a b` stored a when b failed. Now every file is checked first and
// the error names the one that failed; the store is untouched.
TEST_F(BenchToolTest, IngestIsAllOrNothing) {
  const std::string good =
      Write("good.json", testing::SyntheticRun("cccc0001", "2026-01-01", 1));
  const std::string bad = WriteText(
      "bad.json", R"({"benchmarks": [{"name": "x", "real_time": "slow"}]})");
  std::string out;
  EXPECT_EQ(Tool("ingest " + good + " " + bad, &out), 2) << out;
  EXPECT_NE(out.find("nothing stored"), std::string::npos) << out;
  EXPECT_NE(out.find("bad.json"), std::string::npos) << out;
  EXPECT_NE(out.find(R"(field 'real_time' is "slow")"), std::string::npos)
      << out;
  EXPECT_EQ(Tool("ingest " + good + " " + dir_.string() + "/absent.json", &out),
            2);
  EXPECT_NE(out.find("absent.json"), std::string::npos) << out;
  EXPECT_EQ(Tool("runs", &out), 0);
  EXPECT_EQ(out.find("cccc0001"), std::string::npos) << out;
  EXPECT_EQ(Tool("summary latest", &out), 2);
  EXPECT_NE(out.find("holds 0 runs"), std::string::npos) << out;
  EXPECT_EQ(Tool("ingest " + good, &out), 0) << out;
  EXPECT_EQ(Tool("runs", &out), 0);
  EXPECT_NE(out.find("cccc0001"), std::string::npos) << out;
}

// `latest` was the largest date: a run dated 2099 ingested first stayed
// `latest`, and `compare latest~1 latest` compared the new run against it
// backwards -- a 20% slowdown read as a speedup, exit 0.
TEST_F(BenchToolTest, LatestIsTheLastIngestedRun) {
  testing::Plant slow;
  slow.slowdown["prefill/reference/S:128/d:64/causal:0/hkv:8/real_time"] = 1.2;
  const std::string future =
      Write("future.json", testing::SyntheticRun("dddd0001", "2099-01-01", 1));
  const std::string now = Write(
      "now.json", testing::SyntheticRun("dddd0002", "2026-11-21", 2, 9, slow));
  std::string out;
  ASSERT_EQ(Tool("ingest " + future + " " + now, &out), 0) << out;
  EXPECT_EQ(Tool("compare latest~1 latest", &out), 1) << out;
  EXPECT_NE(out.find("REGRESSION"), std::string::npos) << out;
  EXPECT_EQ(Tool("compare latest~99999999999999999999 latest", &out), 2);
  EXPECT_NE(out.find("N='99999999999999999999'"), std::string::npos) << out;
  EXPECT_EQ(Tool("compare latest~2 latest", &out), 2);
  EXPECT_NE(out.find("holds 2 runs (latest~0 to latest~1)"), std::string::npos)
      << out;
}

// The gate's exits: a missing benchmark (1, listed; 0 with --allow-missing),
// every benchmark gone (1 even then), a slowdown 2 repetitions cannot
// decide (1, not `same`).
TEST_F(BenchToolTest, CompareFailsOnWhatItCouldNotTest) {
  RunData base = testing::SyntheticRun("eeee0001", "2026-01-01", 1);
  RunData filtered = testing::SyntheticRun("eeee0002", "2026-01-02", 2);
  const std::string dropped = testing::kSyntheticDecode;
  filtered.benchmarks.erase(dropped);
  const std::string b = Write("base.json", base);
  const std::string f = Write("filtered.json", filtered);
  std::string out;
  EXPECT_EQ(Tool("compare " + b + " " + f, &out), 1) << out;
  EXPECT_NE(out.find("missing from the new run (--allow-missing accepts "
                     "them):\n  " +
                     dropped),
            std::string::npos)
      << out;
  EXPECT_EQ(Tool("compare " + b + " " + f + " --allow-missing", &out), 0)
      << out;

  RunData other;
  other.info.sha = "eeee0003";
  other.benchmarks["unrelated/real_time"] = base.benchmarks.begin()->second;
  const std::string o = Write("other.json", other);
  EXPECT_EQ(Tool("compare " + b + " " + o + " --allow-missing", &out), 1)
      << out;
  EXPECT_NE(out.find("nothing was compared"), std::string::npos) << out;

  testing::Plant slow;
  slow.slowdown["prefill/reference/S:128/d:64/causal:0/hkv:8/real_time"] = 100;
  const std::string two =
      Write("two.json", testing::SyntheticRun("eeee0004", "d", 4, 2));
  const std::string two_slow = Write(
      "two_slow.json", testing::SyntheticRun("eeee0005", "d", 5, 2, slow));
  EXPECT_EQ(Tool("compare " + two + " " + two_slow, &out), 1) << out;
  EXPECT_NE(out.find("too few repetitions to decide"), std::string::npos)
      << out;
  EXPECT_EQ(Tool("--help", &out), 0);
  EXPECT_NE(out.find("--allow-missing"), std::string::npos) << out;
  EXPECT_NE(out.find("  1  compare: the gate failed"), std::string::npos)
      << out;
}

// Escape sequences in names, hosts, error messages and file names reach the
// terminal as text ("\x1b[2J"), in every command's output.
TEST_F(BenchToolTest, ControlCharactersNeverReachTheTerminal) {
  RunData run = testing::SyntheticRun("ffff0001", "2026-01-01", 1);
  run.info.host = "host\x1b]0;pwned\x07";
  run.info.date = "2026\x1b[2J";
  run.benchmarks["decode/evil\x1b[31m/kv_len:1/real_time"] =
      run.benchmarks.begin()->second;
  run.benchmarks["prefill/x/S:1/real_time"].error = "bad\x1b[1moutput";
  const std::string a = Write("evil\x1b[5m.json", run);
  std::string out;
  auto expect_clean = [&](int status, const std::string& args) {
    EXPECT_EQ(Tool(args, &out), status) << args << "\n" << out;
    EXPECT_EQ(out.find('\x1b'), std::string::npos) << args << "\n" << out;
    EXPECT_EQ(out.find('\x07'), std::string::npos) << args << "\n" << out;
  };
  expect_clean(1, "compare '" + a + "' '" + a + "'");  // the failed check
  EXPECT_NE(out.find("decode/evil\\x1b[31m/kv_len:1"), std::string::npos)
      << out;
  EXPECT_NE(out.find("bad\\x1b[1moutput"), std::string::npos) << out;
  expect_clean(0, "summary '" + a + "'");
  expect_clean(0, "ingest '" + a + "'");
  EXPECT_NE(out.find("evil\\x1b[5m.json"), std::string::npos) << out;
  expect_clean(0, "runs");
  EXPECT_NE(out.find("host\\x1b]0;pwned\\x07"), std::string::npos) << out;
  expect_clean(0, "dashboard -o " + (dir_ / "d.html").string());
  // Errors: a name and a value with escapes, an unknown command.
  const std::string bad = WriteText(
      "bad.json",
      R"({"benchmarks": [{"name": "n\u001b[31m", "time_unit": "\u001b[2J"}]})");
  expect_clean(2, "compare " + bad + " " + bad);
  EXPECT_NE(out.find("'n\\x1b[31m'"), std::string::npos) << out;
  expect_clean(2, "\"$(printf 'frob\\033nicate')\"");
  EXPECT_NE(out.find("frob\\x1bnicate"), std::string::npos) << out;
}

// `ab` end to end against fake benchmark binaries: shell scripts that list
// their benchmarks and print a prepared Google Benchmark JSON per run.
class BenchToolAbTest : public BenchToolTest {
 protected:
  // A fake binary `side` whose benchmark `name` takes ns per iteration
  // (at pct_peak `pct`); a negative ns makes its runs crash.
  void Bench(const std::string& side, const std::string& name, double ns,
             double pct = 50) {
    const fs::path d = dir_ / side;
    fs::create_directories(d);
    std::ofstream(d / "list.txt", std::ios::app) << name << "\n";
    std::string file = name;
    for (char& c : file) c = (c == '/' || c == ':') ? '_' : c;
    if (ns < 0) {
      std::ofstream(d / (file + ".crash")) << "";
    } else {
      RunData run;
      run.info.sha = "abab";
      BenchmarkSamples s;
      s.metrics[std::string(kTimeMetric)] = {ns};
      s.metrics["pct_peak"] = {pct};
      run.benchmarks[name] = s;
      std::ofstream(d / (file + ".json")) << ToGoogleBenchmarkJson(run);
    }
    const fs::path script = dir_ / (side + ".sh");
    std::ofstream(script)
        << "#!/bin/sh\n"
           "d='"
        << d.string()
        << "'\n"
           "for a in \"$@\"; do\n"
           "  case \"$a\" in\n"
           "    --benchmark_list_tests*) cat \"$d/list.txt\"; exit 0 ;;\n"
           "    --benchmark_filter=*) f=\"${a#--benchmark_filter=}\" ;;\n"
           "  esac\n"
           "done\n"
           "n=$(printf '%s' \"$f\" | sed 's/^\\^//; s/\\$$//; "
           "s/\\\\//g' | tr '/:' '__')\n"
           "[ -f \"$d/$n.crash\" ] && kill -SEGV $$\n"
           "[ -f \"$d/$n.json\" ] || exit 3\n"
           "cat \"$d/$n.json\"\n";
    fs::permissions(script, fs::perms::owner_all);
  }
  int Ab(const std::string& extra, std::string* out) {
    return Tool("ab --base-bin " + (dir_ / "base.sh").string() + " --new-bin " +
                    (dir_ / "new.sh").string() +
                    " --rounds 5 --min-time 0.01 " + extra,
                out);
  }
};

TEST_F(BenchToolAbTest, EqualBinariesPassAndReportTheirLimits) {
  for (const char* side : {"base", "new"}) {
    Bench(side, "prefill/x/S:128/real_time", 1000, 80);
    Bench(side, "decode/x/kv_len:4/real_time", 500, 60);
  }
  std::string out;
  EXPECT_EQ(Ab("", &out), 0) << out;
  EXPECT_NE(out.find("1.000"), std::string::npos) << out;
  EXPECT_NE(out.find("80.0 -> 80.0"), std::string::npos) << out;
  EXPECT_NE(out.find("2 benchmarks, 5 rounds: 0 faster, 2 same, 0 slower, "
                     "0 undecided, 0 failed"),
            std::string::npos)
      << out;
}

TEST_F(BenchToolAbTest, ASlowerBenchmarkFailsAFasterOnePasses) {
  Bench("base", "prefill/x/S:128/real_time", 1000);
  Bench("new", "prefill/x/S:128/real_time", 1200);
  Bench("base", "decode/x/kv_len:4/real_time", 500);
  Bench("new", "decode/x/kv_len:4/real_time", 400);
  std::string out;
  EXPECT_EQ(Ab("", &out), 1) << out;
  EXPECT_NE(out.find("1.200"), std::string::npos) << out;
  EXPECT_NE(out.find(" 5/5 "), std::string::npos) << out;
  EXPECT_NE(out.find("SLOWER"), std::string::npos) << out;
  EXPECT_NE(out.find("faster"), std::string::npos) << out;
  // Under the threshold: not a regression.
  EXPECT_EQ(Ab("--threshold 0.3", &out), 0) << out;
  // Too few rounds to resolve the slowdown: undecided, which fails.
  EXPECT_EQ(
      Tool("ab --base-bin " + (dir_ / "base.sh").string() + " --new-bin " +
               (dir_ / "new.sh").string() + " --rounds 4 --min-time 0.01",
           &out),
      1)
      << out;
  EXPECT_NE(out.find("UNDECIDED"), std::string::npos) << out;
}

TEST_F(BenchToolAbTest, ACrashInEitherBinaryFailsItsRow) {
  Bench("base", "prefill/x/S:128/real_time", 1000);
  Bench("new", "prefill/x/S:128/real_time", -1);  // crashes
  Bench("base", "decode/x/kv_len:4/real_time", 500);
  Bench("new", "decode/x/kv_len:4/real_time", 500);
  Bench("new", "decode/x/kv_len:8/real_time", 500);  // only in NEW
  std::string out;
  EXPECT_EQ(Ab("", &out), 1) << out;
  EXPECT_NE(out.find("FAILED"), std::string::npos) << out;
  EXPECT_NE(out.find("signal 11"), std::string::npos) << out;
  EXPECT_NE(out.find("only in NEW: decode/x/kv_len:8/real_time"),
            std::string::npos)
      << out;
}

TEST_F(BenchToolAbTest, BadUsageIsExitTwo) {
  Bench("new", "prefill/x/S:128/real_time", 1000);
  std::string out;
  // BASE cannot list its benchmarks (no such file).
  EXPECT_EQ(Ab("", &out), 2) << out;
  EXPECT_NE(out.find("base.sh"), std::string::npos) << out;
  EXPECT_EQ(Tool("ab --new-bin " + (dir_ / "new.sh").string(), &out), 2) << out;
  EXPECT_NE(out.find("--base-bin"), std::string::npos) << out;
  EXPECT_EQ(Tool("ab --base-bin x --new-bin y --rounds 0", &out), 2) << out;
  EXPECT_NE(out.find("--rounds"), std::string::npos) << out;
}

}  // namespace
}  // namespace attnkit::bench
