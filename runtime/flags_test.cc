#include "runtime/flags.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/problem.h"

namespace attnkit {
namespace {

// Parses a copy of args (argv is char* const*, as main's).
Status Parse(FlagParser& f, std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return f.Parse(static_cast<int>(argv.size()), argv.data());
}

struct Targets {
  int64_t layers = 4;
  uint64_t seed = 1;
  uint64_t cases = 0;
  std::string json;
  std::string name = "default";
  std::vector<std::string> plugins;
  bool quick = false;
  DType dtype = DType::kF32;
  KvLayout layout = KvLayout::kBHSD;
  double budget = 0;
};

FlagParser MakeParser(Targets& t) {
  FlagParser f("tool [flags]", "Does a thing.");
  f.Int64("--layers", &t.layers, 1, 4096, "layers (default 4)")
      .Uint64("--seed", &t.seed, "seed")
      .Uint64("--cases", &t.cases, "cases", uint64_t{1} << 40)
      .NonEmptyString("--json", &t.json, "FILE", "JSON output",
                      "empty file name")
      .String("--name", &t.name, "NAME", "a name\nover two lines")
      .Strings("--plugin", &t.plugins, "LIB.so", "a plug-in (repeatable)",
               "needs a file name")
      .Bool("--quick", &t.quick, "the reduced grid")
      .Enum("--dtype", &t.dtype, kFloatDTypeNames, "storage")
      .Enum("--layout", &t.layout, kKvLayoutNames, "KV layout")
      .Custom("--time-budget", "S", "seconds",
              [&t](std::string_view v) -> std::string {
                if (v != "1.5") return "not a number of seconds in (0, 1e7]";
                t.budget = 1.5;
                return "";
              });
  return f;
}

TEST(FlagsTest, BothValueFormsBooleansEnumsAndRepeats) {
  Targets t;
  FlagParser f = MakeParser(t);
  ASSERT_TRUE(
      Parse(f, {"--layers", "2", "--seed=7", "--json", "o.json", "--plugin",
                "a.so", "--plugin=b.so", "--quick", "--dtype=bf16", "--layout",
                "tv", "--time-budget", "1.5", "--name="})
          .ok());
  EXPECT_EQ(t.layers, 2);
  EXPECT_EQ(t.seed, 7u);
  EXPECT_EQ(t.json, "o.json");
  EXPECT_EQ(t.plugins, (std::vector<std::string>{"a.so", "b.so"}));
  EXPECT_TRUE(t.quick);
  EXPECT_EQ(t.dtype, DType::kBF16);
  EXPECT_EQ(t.layout, KvLayout::kTransposedV);
  EXPECT_EQ(t.budget, 1.5);
  EXPECT_EQ(t.name, "");  // String accepts an empty value
  EXPECT_TRUE(f.Seen("--layers"));
  EXPECT_TRUE(f.Seen("--plugin"));
  EXPECT_FALSE(f.Seen("--cases"));
  EXPECT_FALSE(f.help());
}

TEST(FlagsTest, TheLastValueWinsAndValuesMayLookLikeFlags) {
  Targets t;
  FlagParser f = MakeParser(t);
  ASSERT_TRUE(
      Parse(f, {"--layers=3", "--layers", "5", "--name", "--quick"}).ok());
  EXPECT_EQ(t.layers, 5);
  EXPECT_EQ(t.name, "--quick");  // `--name value` takes the next argument
  EXPECT_FALSE(t.quick);
}

TEST(FlagsTest, BooleansTakeNoSeparateValue) {
  Targets t;
  FlagParser f = MakeParser(t);
  std::vector<std::string> rest;
  f.Positional(&rest);
  ASSERT_TRUE(Parse(f, {"--quick", "false"}).ok());
  EXPECT_TRUE(t.quick);
  EXPECT_EQ(rest, (std::vector<std::string>{"false"}));
  ASSERT_TRUE(Parse(f, {"--quick=false"}).ok());
  EXPECT_FALSE(t.quick);
  ASSERT_TRUE(Parse(f, {"--quick=1"}).ok());
  EXPECT_TRUE(t.quick);
}

TEST(FlagsTest, BadInputNamesTheFlagAndTheValue) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--layers", "0"}, "--layers=0: not an integer in [1, 4096]"},
      {{"--layers=x"}, "--layers=x: not an integer in [1, 4096]"},
      {{"--layers", "12x"}, "--layers=12x: not an integer in [1, 4096]"},
      {{"--layers="}, "--layers=: not an integer in [1, 4096]"},
      {{"--seed=-1"}, "--seed=-1: not a non-negative integer"},
      {{"--cases", "abc"}, "--cases=abc: not an integer in [0, 2^40]"},
      {{"--cases", "1099511627777"},
       "--cases=1099511627777: not an integer in [0, 2^40]"},
      {{"--json="}, "--json=: empty file name"},
      {{"--plugin", ""}, "--plugin=: needs a file name"},
      {{"--dtype", "f16"}, "--dtype=f16: not f32|bf16"},
      {{"--layout=hsd"}, "--layout=hsd: not bhsd|bshd|tv"},
      {{"--quick=maybe"}, "--quick=maybe: not true|false"},
      {{"--time-budget", "-1"},
       "--time-budget=-1: not a number of seconds in (0, 1e7]"},
      {{"--frobnicate", "1"}, "--frobnicate: unknown flag (see --help)"},
      {{"--frobnicate=1"}, "--frobnicate: unknown flag (see --help)"},
      {{"-x"}, "-x: unknown flag (see --help)"},
      {{"--layers"}, "--layers needs a value"},
      {{"stray"}, "unexpected argument 'stray'"},
  };
  for (const auto& [args, want] : cases) {
    Targets t;
    FlagParser f = MakeParser(t);
    const Status s = Parse(f, args);
    ASSERT_FALSE(s.ok()) << want;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), want);
  }
}

TEST(FlagsTest, ABadValueLeavesTheTargetAlone) {
  Targets t;
  FlagParser f = MakeParser(t);
  EXPECT_FALSE(Parse(f, {"--layers", "0"}).ok());
  EXPECT_EQ(t.layers, 4);
  EXPECT_FALSE(Parse(f, {"--dtype", "f64"}).ok());
  EXPECT_EQ(t.dtype, DType::kF32);
}

TEST(FlagsTest, HelpPositionalsAndPassThrough) {
  Targets t;
  FlagParser f = MakeParser(t);
  ASSERT_TRUE(Parse(f, {"--help"}).ok());
  EXPECT_TRUE(f.help());
  ASSERT_TRUE(Parse(f, {"-h"}).ok());
  EXPECT_TRUE(f.help());
  ASSERT_TRUE(Parse(f, {}).ok());
  EXPECT_FALSE(f.help());

  std::vector<std::string> pos, unknown;
  f.Positional(&pos).PassUnknown(&unknown);
  ASSERT_TRUE(Parse(f, {"a.json", "--benchmark_filter=x", "--layers", "2", "-",
                        "--benchmark_min_time=0.01s", "b.json"})
                  .ok());
  EXPECT_EQ(pos, (std::vector<std::string>{"a.json", "-", "b.json"}));
  EXPECT_EQ(unknown, (std::vector<std::string>{"--benchmark_filter=x",
                                               "--benchmark_min_time=0.01s"}));
  EXPECT_EQ(t.layers, 2);
  // Known flags are still checked.
  EXPECT_EQ(Parse(f, {"--layers=0"}).message(),
            "--layers=0: not an integer in [1, 4096]");
}

TEST(FlagsTest, UsageListsEveryFlagWithItsHelp) {
  Targets t;
  FlagParser f = MakeParser(t);
  f.Epilogue("Exit status: 0 ok, 2 bad usage.\n");
  const std::string u = f.Usage();
  EXPECT_EQ(u.rfind("usage: tool [flags]\n\nDoes a thing.\n\n", 0), 0u) << u;
  EXPECT_NE(u.find("  --layers N          layers (default 4)\n"),
            std::string::npos)
      << u;
  EXPECT_NE(u.find("  --dtype f32|bf16    storage\n"), std::string::npos) << u;
  // A long head gets its own line; help lines stay in their column.
  EXPECT_NE(u.find("  --layout bhsd|bshd|tv\n" + std::string(22, ' ') +
                   "KV layout\n"),
            std::string::npos)
      << u;
  EXPECT_NE(u.find("  --name NAME         a name\n"
                   "                      over two lines\n"),
            std::string::npos)
      << u;
  EXPECT_NE(u.find("  --quick             the reduced grid\n"),
            std::string::npos)
      << u;
  EXPECT_NE(u.find("  --help              this text\n"), std::string::npos)
      << u;
  EXPECT_NE(u.find("\nExit status: 0 ok, 2 bad usage.\n"), std::string::npos);
}

TEST(FlagsTest, IntegerRangeWritesLargePowersOfTwo) {
  EXPECT_EQ(IntegerRange(1, 4096), "[1, 4096]");
  EXPECT_EQ(IntegerRange(0, int64_t{1} << 30), "[0, 2^30]");
  EXPECT_EQ(IntegerRange(-(int64_t{1} << 20), 3), "[-2^20, 3]");
  EXPECT_EQ(IntegerRange(0, (int64_t{1} << 30) + 1), "[0, 1073741825]");
}

}  // namespace
}  // namespace attnkit
