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
    const fs::path p = dir_ / name;
    std::ofstream(p) << ToGoogleBenchmarkJson(run);
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

}  // namespace
}  // namespace attnkit::bench
