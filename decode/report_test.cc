#include "decode/report.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "backends/registry.h"

namespace attnkit::decode {
namespace {

StatusOr<DecodeReportOptions> Parse(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return ParseDecodeFlags(static_cast<int>(argv.size()), argv.data());
}

TEST(DecodeReportTest, FlagsParseInBothForms) {
  auto o =
      Parse({"--layers", "2", "--heads=8", "--kv-heads", "2", "--head-dim=64",
             "--steps", "3", "--start-len", "0,17,256", "--dtype", "bf16",
             "--layout=tv", "--backend", "reference", "--json", "/tmp/x.json"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->config.layers, 2);
  EXPECT_EQ(o->config.q_heads, 8);
  EXPECT_EQ(o->config.kv_heads, 2);
  EXPECT_EQ(o->config.head_dim, 64);
  EXPECT_EQ(o->config.steps, 3);
  EXPECT_EQ(o->start_lens, (std::vector<int64_t>{0, 17, 256}));
  EXPECT_EQ(o->config.dtype, DType::kBF16);
  EXPECT_EQ(o->config.layout, KvLayout::kTransposedV);
  EXPECT_EQ(o->json_path, "/tmp/x.json");
  // --kv-heads follows --heads unless given.
  o = Parse({"--heads", "12"});
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->config.kv_heads, 12);
}

TEST(DecodeReportTest, BadFlagsNameTheFlagAndValue) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--layers", "0"}, "--layers=0"},
      {{"--heads=x"}, "--heads=x"},
      {{"--steps", "-3"}, "--steps=-3"},
      {{"--head-dim", "5000"}, "--head-dim=5000"},
      {{"--start-len", "1024,abc"}, "--start-len=1024,abc"},
      {{"--start-len="}, "--start-len="},
      {{"--dtype", "f16"}, "--dtype=f16"},
      {{"--layout", "hsd"}, "--layout=hsd"},
      {{"--backend", "nope"}, "--backend=nope"},
      {{"--heads", "8", "--kv-heads", "3"}, "--kv-heads=3"},
      {{"--frobnicate", "1"}, "--frobnicate"},
      {{"--layers"}, "--layers needs a value"},
      {{"--plugin", "/nonexistent/libx.so"}, "--plugin=/nonexistent/libx.so: "},
      {{"--plugin="}, "--plugin=: needs a file name"},
      {{"--backend", "reference,nope"}, "'nope' is not a registered backend"},
      {{"--backend", "reference,reference"},
       "backend 'reference' is already in the list"},
#ifdef ATTNKIT_EXAMPLE_PLUGIN
      {{"--plugin", ATTNKIT_EXAMPLE_PLUGIN, "--plugin", ATTNKIT_EXAMPLE_PLUGIN},
       "backend 'example' is already in the list"},
#endif
  };
  for (const auto& [args, want] : cases) {
    const auto o = Parse(args);
    ASSERT_FALSE(o.ok()) << want;
    EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(o.status().message().find(want), std::string::npos)
        << o.status().message();
  }
  std::string bad = "--dtype=f64";
  char* argv[] = {bad.data()};
  EXPECT_EQ(DecodeMain(1, argv), 2);
}

// A backend that declines every problem, as a correct plug-in declines a
// head_dim it has no kernel for.
class DecliningBackend : public Backend {
 public:
  std::string_view name() const override { return "declines"; }
  Status Supports(const AttentionProblem& p) const override {
    return Status::Unimplemented("head_dim=" + std::to_string(p.head_dim) +
                                 " has no kernel");
  }
  Status Attention(const AttentionProblem&, const AttentionArgs&) override {
    return Status::Internal("must not be called: Supports() declined");
  }
};

DecodeBackend Declining() {
  return {"declines", {}, []() -> StatusOr<std::unique_ptr<Backend>> {
            return std::unique_ptr<Backend>(new DecliningBackend);
          }};
}

TEST(DecodeReportTest, ConfigurationsOverMaxMemoryAreRefusedBeforeRunning) {
  DecodeReportOptions o;
  o.config.head_dim = 16;
  o.config.steps = 2;
  o.start_lens = {8, int64_t{1} << 30};
  o.max_memory_bytes = int64_t{1} << 30;
  auto report = RunDecodeReport(o, nullptr);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(report.status().message().find(
                "decode configuration kv_len=1073741824 needs an estimated"),
            std::string::npos)
      << report.status().message();
  EXPECT_NE(report.status().message().find("--max-memory=1073741824"),
            std::string::npos);
  std::string a = "--start-len=1073741824", b = "--max-memory=1G";
  char* argv[] = {a.data(), b.data()};
  EXPECT_EQ(DecodeMain(2, argv), 2);
}

TEST(DecodeReportTest, DeclinedConfigurationsAreSkippedNotFailed) {
  DecodeReportOptions o;
  o.config.q_heads = 2;
  o.config.kv_heads = 1;
  o.config.head_dim = 8;
  o.config.steps = 2;
  o.start_lens = {8};
  o.backends = {Declining()};
  auto report = RunDecodeReport(o, nullptr);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->failures.empty()) << report->failures.front();
  // The table's configuration, then the three cache-contract ones.
  ASSERT_EQ(report->skipped.size(), 4u);
  EXPECT_NE(report->skipped[0].find(
                "UNIMPLEMENTED: naive_concat: head_dim=8 has no kernel"),
            std::string::npos)
      << report->skipped[0];
  for (size_t i = 1; i < 4; ++i) {
    EXPECT_NE(report->skipped[i].find("cache contract"), std::string::npos)
        << report->skipped[i];
  }
  EXPECT_EQ(report->contract_checked, 0);
  EXPECT_TRUE(report->nothing_compared());
  const std::string table = FormatDecodeTable(*report, o);
  EXPECT_NE(table.find("decode: SKIP"), std::string::npos) << table;
  EXPECT_NE(table.find("decode: NOTHING COMPARED"), std::string::npos);
  EXPECT_EQ(table.find("decode: PASS"), std::string::npos) << table;

  // Beside a backend that runs, the report compares that one.
  o.backends.push_back({"reference", backends::TraitsOf("reference"), {}});
  report = RunDecodeReport(o, nullptr);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->failures.empty()) << report->failures.front();
  EXPECT_EQ(report->compared, 1);
  EXPECT_FALSE(report->nothing_compared());
}

// A small stack: 2 layers, GQA 4:2 of 16, 4 steps from contexts of 8 and
// 64 tokens.
DecodeReportOptions SmallRun() {
  DecodeReportOptions o;
  o.config.layers = 2;
  o.config.q_heads = 4;
  o.config.kv_heads = 2;
  o.config.head_dim = 16;
  o.config.steps = 4;
  o.start_lens = {8, 64};
  return o;
}

TEST(DecodeReportTest, SmallRunPassesTheGateAndWritesExactlyTheKeys) {
  DecodeReportOptions o = SmallRun();
  o.config.layout = KvLayout::kBSHD;
  auto report = RunDecodeReport(o, nullptr);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->failures.empty()) << report->failures.front();
  ASSERT_EQ(report->rows.size(), 4u);
  for (const DecodeReportRow& r : report->rows) {
    EXPECT_EQ(r.new_token_bytes, 2 * 2 * 2 * 16 * 4);
    if (r.mode == DecodeMode::kInPlace) {
      EXPECT_EQ(r.allocs_per_step, 0);
      EXPECT_EQ(r.bytes_copied_per_step, r.new_token_bytes);
    } else {
      // Mean over steps 2..4 of the context (kv_len + 2..4 tokens) re-copied.
      EXPECT_EQ(r.bytes_copied_per_step,
                static_cast<double>(r.new_token_bytes) * (r.kv_len + 3));
      EXPECT_GE(r.allocs_per_step, 2 * 2);
    }
    EXPECT_GT(r.peak_bytes, 0);
  }
  const std::string table = FormatDecodeTable(*report, o);
  EXPECT_NE(table.find("decode: PASS"), std::string::npos) << table;

  auto json = nlohmann::json::parse(DecodeReportJson(*report, o));
  EXPECT_EQ(json["schema"], "attnkit.decode.v1");
  EXPECT_EQ(json["config"]["layers"], 2);
  EXPECT_EQ(json["config"]["layout"], "bshd");
  EXPECT_EQ(json["failures"], nlohmann::json::array());
  const std::set<std::string> want = {"backend",
                                      "mode",
                                      "kv_len",
                                      "allocs_per_step",
                                      "bytes_allocated_per_step",
                                      "bytes_copied_per_step",
                                      "new_token_bytes",
                                      "append_us",
                                      "attention_us",
                                      "step_us",
                                      "peak_bytes"};
  ASSERT_EQ(json["rows"].size(), 4u);
  std::set<std::string> modes;
  for (auto& row : json["rows"]) {
    std::set<std::string> keys;
    for (const auto& [key, value] : row.items()) {
      keys.insert(key);
      if (key != "backend" && key != "mode") {
        EXPECT_TRUE(value.is_number()) << key << " in " << row.dump();
      }
    }
    EXPECT_EQ(keys, want) << row.dump();
    modes.insert(row["mode"].get<std::string>());
  }
  EXPECT_EQ(modes, (std::set<std::string>{"naive_concat", "in_place"}));
}

// JSON has no NaN or Inf: a figure that is not a number (the median of no
// steps) is written as null, and the document stays valid JSON with its keys
// in the order of the schema comment in report.h.
TEST(DecodeReportTest, JsonWritesNonFiniteNumbersAsNullInSchemaOrder) {
  DecodeReportOptions o;
  o.config.backend = "reference";
  DecodeReport report;
  DecodeReportRow row;
  row.backend = "reference";
  row.append_us = std::nan("");
  row.attention_us = std::numeric_limits<double>::infinity();
  row.step_us = 2.5;
  report.rows.push_back(row);
  report.failures.push_back("a \"quoted\"\tline");
  const std::string text = DecodeReportJson(report, o);
  auto json = nlohmann::json::parse(text);
  EXPECT_TRUE(json["rows"][0]["append_us"].is_null()) << text;
  EXPECT_TRUE(json["rows"][0]["attention_us"].is_null()) << text;
  EXPECT_EQ(json["rows"][0]["step_us"], 2.5);
  EXPECT_EQ(json["failures"][0], "a \"quoted\"\tline");
  EXPECT_LT(text.find("\"schema\""), text.find("\"config\""));
  EXPECT_LT(text.find("\"config\""), text.find("\"rows\""));
  EXPECT_LT(text.find("\"rows\""), text.find("\"failures\""));
  EXPECT_LT(text.find("\"append_us\""), text.find("\"attention_us\""));
}

// The reference backend with every attention output shifted by `offset`:
// both modes shift alike, so only the comparison with the oracle sees it.
class ShiftedBackend : public Backend {
 public:
  explicit ShiftedBackend(float offset)
      : inner_(std::move(backends::MakeBackend("reference")).value()),
        offset_(offset) {}
  std::string_view name() const override { return "shifted"; }
  Status ReserveWorkspace(const AttentionProblem& largest) override {
    return inner_->ReserveWorkspace(largest);
  }
  Status AppendKv(const KvAppendArgs& a) override {
    return inner_->AppendKv(a);
  }
  Status Attention(const AttentionProblem& p,
                   const AttentionArgs& args) override {
    ATTNKIT_RETURN_IF_ERROR(inner_->Attention(p, args));
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.q_heads; ++h)
        for (int64_t i = 0; i < p.q_lens[b]; ++i)
          for (int64_t e = 0; e < p.head_dim; ++e) {
            args.out.Store(b, h, i, e, args.out.Load(b, h, i, e) + offset_);
          }
    return Status::Ok();
  }

 private:
  std::unique_ptr<Backend> inner_;
  float offset_;
};

DecodeReportOptions ShiftedRun(float offset) {
  DecodeReportOptions o;
  o.config.layers = 1;
  o.config.q_heads = 4;
  o.config.kv_heads = 2;
  o.config.head_dim = 32;
  o.config.steps = 2;
  o.start_lens = {256};
  o.backends.push_back({"shifted", {}, [offset] {
                          return StatusOr<std::unique_ptr<Backend>>(
                              std::make_unique<ShiftedBackend>(offset));
                        }});
  return o;
}

// The tolerance model's bound here is a few 1e-6 (twice the naive f32
// reference's error plus 32 ulp of max |v|): a shift of 5e-5, invisible to a
// fixed 2e-4 floor, fails; a shift within rounding passes.
TEST(DecodeReportTest, OutputsAreHeldToTheOracleWithTheToleranceModel) {
  auto bad = RunDecodeReport(ShiftedRun(5e-5f), nullptr);
  ASSERT_TRUE(bad.ok()) << bad.status().ToString();
  // Both modes run the shifted attention; they agree with each other. The
  // table's configuration fails first, then each cache-contract one.
  ASSERT_EQ(bad->failures.size(), 8u) << bad->failures[0] << "\n"
                                      << bad->failures.back();
  for (size_t i = 2; i < 8; ++i) {
    EXPECT_NE(bad->failures[i].find("cache contract"), std::string::npos)
        << bad->failures[i];
  }
  for (int i = 0; i < 2; ++i) {
    EXPECT_NE(bad->failures[i].find(
                  std::string(i == 0 ? "naive_concat" : "in_place") +
                  ": last step, sequence 0, differs from the f64 oracle: "
                  "max |err|"),
              std::string::npos)
        << bad->failures[i];
  }

  auto good = RunDecodeReport(ShiftedRun(1e-8f), nullptr);
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_TRUE(good->failures.empty()) << good->failures.front();
}

#if defined(ATTNKIT_EXAMPLE_PLUGIN) && \
    defined(ATTNKIT_EXAMPLE_PLUGIN_APPEND_POSITION_OFF)
StatusOr<DecodeReport> RunPlugin(const char* path,
                                 DecodeReportOptions* options) {
  auto o = Parse({"--plugin", path, "--layers", "2", "--heads", "4",
                  "--kv-heads", "2", "--head-dim", "16", "--steps", "3",
                  "--start-len", "8,40", "--dtype", "bf16"});
  if (!o.ok()) return o.status();
  *options = *o;
  return RunDecodeReport(*o, nullptr);
}

TEST(DecodeReportTest, SeveralBackendsRunInTurnEachInItsOwnBlock) {
  auto o = Parse({"--backend", "all", "--plugin", ATTNKIT_EXAMPLE_PLUGIN,
                  "--layers", "1", "--heads", "4", "--kv-heads", "2",
                  "--head-dim", "16", "--steps", "2", "--start-len", "8"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  std::vector<std::string> want = backends::RegisteredBackendNames();
  want.push_back("example");
  std::vector<std::string> names;
  for (const DecodeBackend& b : o->backends) names.push_back(b.name);
  EXPECT_EQ(names, want);
  auto report = RunDecodeReport(*o, nullptr);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->failures.empty()) << report->failures.front();
  ASSERT_EQ(report->rows.size(), 2 * want.size());
  const std::string table = FormatDecodeTable(*report, *o);
  size_t at = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    // Each backend's block names it, and holds its two rows.
    EXPECT_EQ(report->rows[2 * i].backend, want[i]);
    EXPECT_EQ(report->rows[2 * i + 1].backend, want[i]);
    at = table.find("decode: backend=" + want[i] + " ", at);
    ASSERT_NE(at, std::string::npos) << want[i] << "\n" << table;
  }
  std::string joined;
  for (const std::string& n : want) joined += (joined.empty() ? "" : ",") + n;
  EXPECT_EQ(
      nlohmann::json::parse(DecodeReportJson(*report, *o))["config"]["backend"],
      joined);
}

// A plug-in goes through the same meters and gate as a built-in backend:
// its append_kv hook is the in-place update being counted.
TEST(DecodeReportTest, PluginIsMeteredAndGatedLikeABackend) {
  DecodeReportOptions o;
  auto report = RunPlugin(ATTNKIT_EXAMPLE_PLUGIN, &o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(o.config.backend, "example");
  EXPECT_TRUE(report->failures.empty()) << report->failures.front();
  ASSERT_EQ(report->rows.size(), 4u);
  for (const DecodeReportRow& r : report->rows) {
    EXPECT_EQ(r.backend, "example");
    if (r.mode == DecodeMode::kInPlace) {
      EXPECT_EQ(r.allocs_per_step, 0);
      EXPECT_EQ(r.bytes_copied_per_step, r.new_token_bytes);
    }
  }
  EXPECT_NE(FormatDecodeTable(*report, o).find("decode: PASS"),
            std::string::npos);
}

TEST(DecodeReportTest, PluginWithAnAppendBugFailsTheGate) {
  DecodeReportOptions o;
  auto report = RunPlugin(ATTNKIT_EXAMPLE_PLUGIN_APPEND_POSITION_OFF, &o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(o.config.backend, "example_append_position_off");
  ASSERT_FALSE(report->failures.empty());
  // The cache audit names the first wrong byte before the outputs differ.
  EXPECT_NE(report->failures.front().find("in_place: KV cache: layer 0 "),
            std::string::npos)
      << report->failures.front();
  EXPECT_NE(FormatDecodeTable(*report, o).find("decode: FAIL"),
            std::string::npos);
}
#endif

// An i8 cache through the whole report on every backend that takes it: the
// gate holds (no allocation, exactly the quantized tokens and their scales
// copied, the cache's bytes and scales audited), and the in-place rows carry
// the end-to-end error against an unquantized cache -- small but not zero.
// Every registered backend takes an i8 K/V (simd and compiled when built).
TEST(DecodeReportTest, QuantizedCachePassesTheGateAndReportsItsError) {
  for (const std::string& backend : backends::RegisteredBackendNames()) {
    DecodeReportOptions o = SmallRun();
    o.config.kv_dtype = DType::kI8;
    o.backends.push_back({backend, backends::TraitsOf(backend), {}});
    auto report = RunDecodeReport(o, nullptr);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_TRUE(report->failures.empty()) << report->failures.front();
    EXPECT_EQ(report->contract_checked, 3);
    ASSERT_EQ(report->rows.size(), 4u);
    for (const DecodeReportRow& r : report->rows) {
      // 2 layers x 1 sequence x 2 kv heads x (16 int8 + one f32 scale), K+V.
      EXPECT_EQ(r.new_token_bytes, 2 * 2 * 2 * (16 + 4));
      if (r.mode == DecodeMode::kInPlace) {
        EXPECT_EQ(r.allocs_per_step, 0) << backend;
        EXPECT_EQ(r.bytes_copied_per_step, r.new_token_bytes);
        EXPECT_GT(r.kv_quant_max_err, 0) << backend;
        EXPECT_LT(r.kv_quant_rel_err, 0.05) << backend;
      } else {
        EXPECT_TRUE(std::isnan(r.kv_quant_max_err));
      }
    }
    const std::string table = FormatDecodeTable(*report, o);
    EXPECT_NE(table.find("kv_dtype=i8"), std::string::npos) << table;
    EXPECT_NE(table.find("i8 cache vs unquantized"), std::string::npos)
        << table;
    auto json = nlohmann::json::parse(DecodeReportJson(*report, o));
    EXPECT_EQ(json["config"]["kv_dtype"], "i8");
    for (auto& row : json["rows"]) {
      EXPECT_EQ(row.contains("kv_quant_rel_err"), row["mode"] == "in_place")
          << row.dump();
    }
  }
}

// The reference backend whose i8 append rounds one element of every new
// row the wrong way (truncation toward zero, as a plain cast does): the
// cache audit names the element.
class TruncatingBackend : public Backend {
 public:
  TruncatingBackend()
      : inner_(std::move(backends::MakeBackend("reference")).value()) {}
  std::string_view name() const override { return "truncating"; }
  Status AppendKv(const KvAppendArgs& a) override {
    ATTNKIT_RETURN_IF_ERROR(inner_->AppendKv(a));
    // (The report's unquantized twin appends to an f32 cache.)
    if (a.k_cache.dtype != DType::kI8) return Status::Ok();
    for (int64_t b = 0; b < a.k_cache.shape[0]; ++b) {
      if (a.new_lens[b] == 0) continue;
      const int64_t pos = a.positions[b];
      const float x = a.new_k.Load(b, 0, 0, 0);
      const float scale = a.k_scale.Load(b, 0, pos, 0);
      static_cast<int8_t*>(a.k_cache.data)[a.k_cache.Offset(b, 0, pos, 0)] =
          static_cast<int8_t>(x / scale);
    }
    return Status::Ok();
  }
  Status Attention(const AttentionProblem& p,
                   const AttentionArgs& args) override {
    return inner_->Attention(p, args);
  }

 private:
  std::unique_ptr<Backend> inner_;
};

TEST(DecodeReportTest, AnI8AppendThatTruncatesFailsTheCacheAudit) {
  DecodeReportOptions o;
  o.config.q_heads = 2;
  o.config.kv_heads = 1;
  o.config.head_dim = 64;
  o.config.steps = 8;
  o.config.kv_dtype = DType::kI8;
  o.start_lens = {16};
  o.backends.push_back({"truncating", {}, [] {
                          return StatusOr<std::unique_ptr<Backend>>(
                              std::make_unique<TruncatingBackend>());
                        }});
  auto report = RunDecodeReport(o, nullptr);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_FALSE(report->failures.empty());
  EXPECT_NE(report->failures.front().find("KV cache: layer 0 k_cache["),
            std::string::npos)
      << report->failures.front();
  EXPECT_NE(report->failures.front().find("(bit-exact)"), std::string::npos)
      << report->failures.front();
}

TEST(DecodeReportTest, KvDtypeFlagTakesI8AndNamesABadValue) {
  auto o = Parse({"--kv-dtype", "i8", "--dtype=bf16"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->config.kv_dtype, DType::kI8);
  EXPECT_EQ(o->config.dtype, DType::kBF16);
  // The same as --dtype: no quantization.
  o = Parse({"--kv-dtype", "f32"});
  ASSERT_TRUE(o.ok());
  EXPECT_FALSE(o->config.kv_dtype.has_value());
  o = Parse({"--kv-dtype", "bf16"});
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("--kv-dtype=bf16"), std::string::npos)
      << o.status().message();
  o = Parse({"--kv-dtype", "int4"});
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("--kv-dtype=int4"), std::string::npos)
      << o.status().message();
}

}  // namespace
}  // namespace attnkit::decode
