#include <gtest/gtest.h>

#include <string>

#include "backends/remote.h"
#include "harness/campaign.h"
#include "harness/report.h"
#include "harness/runner.h"
#include "harness/test_support.h"
#include "plugin/attnkit_plugin.h"
#include "plugin/loader.h"
#include "runtime/accounting.h"
#include "runtime/attention_block.h"
#include "runtime/random.h"
#include "runtime/shared_memory.h"

namespace attnkit::harness {
namespace {

using testing::CaseFrom;
using testing::RunOne;

// Decode loops over every layout and dtype, ragged batches (a sequence that
// appends nothing, prompts of different lengths), GQA and cache padding: the
// shapes a hand-written append gets wrong.
constexpr const char* kDecodeCases[] = {
    "seed=3,index=1,steps=2,b=2,hq=4,hkv=2,d=5,q=1:1,kv=6:4,layout=tv,"
    "dtype=bf16",
    "seed=3,index=2,pad=3,steps=3,b=3,hq=6,hkv=3,d=17,q=1:0:2,kv=5:3:9,"
    "mask=causal,layout=bshd",
    "seed=3,index=3,pad=1,steps=4,b=2,hq=2,hkv=2,d=8,q=1:1,kv=9:4,"
    "mask=window:3,dtype=bf16,layout=bhsd",
    "seed=3,index=4,steps=2,b=1,hq=8,hkv=1,d=33,q=2,kv=7,mask=bias,"
    "layout=tv",
};

// The first `cases` smoke-tier cases on `backends`, a failure shrunk.
CampaignResult SmokeCampaign(std::span<Backend* const> backends,
                             int64_t cases) {
  CampaignOptions o;
  o.tier = Tier::kSmoke;
  o.cases = cases;
  o.shrink_per_backend = 1;
  return RunCampaign(o, backends);
}

void ExpectDecodeCasesPass(Backend& b) {
  for (const char* text : kDecodeCases) {
    const CheckResult r = RunOne(CaseFrom(text), b);
    EXPECT_EQ(r.outcome, Outcome::kPass) << text << " " << r.message;
  }
}

TEST(PluginTest, TheExamplePluginLoadsAndPassesCases) {
  auto b = plugin::LoadPlugin(ATTNKIT_EXAMPLE_PLUGIN);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)->name(), "example");
  Backend* one[] = {b->get()};
  int blocks = 0;
  for (uint64_t i = 0; i < 60; ++i) {
    const Case c = GenerateCase(Tier::kSmoke, 2, i);
    auto r = RunCase(c, one);
    ASSERT_TRUE(r.ok());
    // Block cases too: the example implements attention_block.
    EXPECT_EQ((*r)[0].outcome, Outcome::kPass)
        << c.ToString() << " " << (*r)[0].message;
    blocks += c.is_block() ? 1 : 0;
  }
  EXPECT_GT(blocks, 0) << "no block case among the 60 drawn";
}

// The blocks the example plug-in's attention_block must get right, against
// the f64 oracle: f32 and bf16 weights, q/k/v biases, Wo, MHA / GQA / MQA,
// ragged prefill with an empty sequence, decode over a context, every mask
// and cache layout, hidden sizes 1 and odd.
AttentionBlockProblem Block(const char* text) {
  auto p = ParseAttentionBlockProblem(text);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return *p;
}
constexpr const char* kBlocks[] = {
    "b=1,hq=4,hkv=4,d=8,q=5,kv=5,mask=causal,hidden=16,w=f32,qkv_bias=0,"
    "wo=0",
    "b=2,hq=6,hkv=2,d=7,q=3:0,kv=9:4,mask=causal,layout=bshd,hidden=33,"
    "w=bf16,qkv_bias=1,wo=1",
    "b=3,hq=8,hkv=1,d=16,q=1:1:1,kv=17:1:40,hidden=1,w=f32,qkv_bias=1,wo=1",
    "b=1,hq=2,hkv=1,d=5,q=4,kv=11,mask=window:3,layout=tv,hidden=7,w=bf16,"
    "qkv_bias=0,wo=1",
    "b=2,hq=4,hkv=2,d=12,q=2:3,kv=6:3,mask=bias,hidden=24,w=f32,"
    "qkv_bias=1,wo=0",
};

TEST(PluginTest, TheExamplePluginsBlockMatchesTheOracle) {
  auto b = plugin::LoadPlugin(ATTNKIT_EXAMPLE_PLUGIN);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  Backend* one[] = {b->get()};
  uint64_t seed = 1;
  for (const char* text : kBlocks) {
    SCOPED_TRACE(text);
    const AttentionBlockProblem p = Block(text);
    ASSERT_TRUE((*b)->SupportsBlock(p).ok());
    testing::ExpectBlockMatchesOracle(one, p, seed++);
  }
}

// The same plug-in isolated in its worker (tensors in shared segments).
TEST(PluginTest, TheExamplePluginsBlockInItsWorkerMatchesTheOracle) {
  auto r = backends::RemoteBackend::Start({"", ATTNKIT_EXAMPLE_PLUGIN});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Backend* one[] = {r->get()};
  uint64_t seed = 1;
  for (const char* text : kBlocks) {
    SCOPED_TRACE(text);
    testing::ExpectBlockMatchesOracle(one, Block(text), seed++);
  }
  EXPECT_EQ((*r)->deaths(), 0);
}

// The block's contract through the adapter: the harness's validation names
// a bad tensor before the plug-in sees it, the plug-in's own refusals come
// back naming the plug-in, the entry and its message.
TEST(PluginTest, BadBlockArgumentsAreNamed) {
  auto b = plugin::LoadPlugin(ATTNKIT_EXAMPLE_PLUGIN);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  AttentionBlockProblem p = Block(kBlocks[1]);
  auto data = AttentionBlockData::Create(p);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  Rng rng(5, 0);
  data->Fill(p, rng);
  AttentionBlockArgs a = data->args();
  a.wq.shape[3] -= 1;
  Status s = (*b)->AttentionBlock(p, a);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("wq: shape[3]=41, expected 42", 0), 0u)
      << s.ToString();
  // wo given although the problem has no output projection.
  p.output_projection = false;
  s = (*b)->AttentionBlock(p, data->args());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "wo: given but wo=0");
  p.output_projection = true;
  p.hidden = 0;
  s = (*b)->SupportsBlock(p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("hidden=0"), std::string::npos) << s.ToString();

  auto small = plugin::LoadPlugin(ATTNKIT_EXAMPLE_PLUGIN_SMALL);
  ASSERT_TRUE(small.ok()) << small.status().ToString();
  AttentionBlockProblem wide =
      Block("b=1,hq=1,hkv=1,d=128,q=1,kv=2,hidden=4,w=f32,qkv_bias=0,wo=0");
  s = (*small)->SupportsBlock(wide);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_EQ(s.message(),
            "plugin example_small: supports_block: head_dim=128 exceeds 64");
  // Called without asking first, its attention_block refuses as well.
  auto wide_data = AttentionBlockData::Create(wide);
  ASSERT_TRUE(wide_data.ok()) << wide_data.status().ToString();
  wide_data->Fill(wide, rng);
  s = (*small)->AttentionBlock(wide, wide_data->args());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "plugin example_small: attention_block: head_dim=128 exceeds 64");
  // A case the plug-in declines is a skip with its reason.
  Case c;
  c.seed = 1;
  c.problem = wide.attention;
  c.hidden = wide.hidden;
  const CheckResult declined = testing::RunOne(c, **small);
  EXPECT_EQ(declined.outcome, Outcome::kSkipped) << declined.message;
}

// Tables built against an older header end before the block entries (the
// variants hold them, with entries that fail every call, but claim the
// shorter size): the loader must not read them -- the block is
// UNIMPLEMENTED and block cases are skipped, never failed -- while the rest
// of the table works.
TEST(PluginTest, TablesEndingBeforeTheBlockEntriesHaveNoBlock) {
  const struct {
    const char* path;
    size_t size;
  } kOld[] = {
      {ATTNKIT_EXAMPLE_PLUGIN_FIRST_V1, ATTNKIT_PLUGIN_V1_BASE_SIZE},
      {ATTNKIT_EXAMPLE_PLUGIN_APPEND_KV_V1, ATTNKIT_PLUGIN_V1_APPEND_KV_SIZE},
  };
  const AttentionBlockProblem p = Block(kBlocks[1]);
  auto data = AttentionBlockData::Create(p);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  for (const auto& old : kOld) {
    auto b = plugin::LoadPlugin(old.path);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    const std::string why =
        "plugin " + std::string((*b)->name()) +
        ": no attention block (struct_size=" + std::to_string(old.size) +
        " ends before attention_block: built against an "
        "older attnkit_plugin.h)";
    const Status s = (*b)->SupportsBlock(p);
    EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
    EXPECT_EQ(s.message(), why);
    const Status called = (*b)->AttentionBlock(p, data->args());
    EXPECT_EQ(called.code(), StatusCode::kUnimplemented);
    EXPECT_EQ(called.message(), why);
    const Case c = testing::BlockCase(p, 1);
    const CheckResult r = testing::RunOne(c, **b);
    EXPECT_EQ(r.outcome, Outcome::kSkipped) << r.message;
    // Its attention and (for the second) its own append still run.
    ExpectDecodeCasesPass(**b);
  }
}

// A table whose block entries are NULL has no block (said so); one that
// sets supports_block without attention_block is refused when loaded.
TEST(PluginTest, NullBlockEntriesMeanNoBlockAndAHalfBlockIsRefused) {
  auto b = plugin::LoadPlugin(ATTNKIT_EXAMPLE_PLUGIN_NO_BLOCK);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  const AttentionBlockProblem p = Block(kBlocks[0]);
  const Status s = (*b)->SupportsBlock(p);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_EQ(s.message(),
            "plugin example_no_block: no attention block (its "
            "attention_block entry is NULL)");
  Case c;
  c.seed = 1;
  c.problem = p.attention;
  c.hidden = p.hidden;
  EXPECT_EQ(RunOne(c, **b).outcome, Outcome::kSkipped);

  auto half = plugin::LoadPlugin(ATTNKIT_EXAMPLE_PLUGIN_SUPPORTS_BLOCK_ONLY);
  ASSERT_FALSE(half.ok());
  EXPECT_EQ(half.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(half.status().message().find(
                ": the table's supports_block entry is set but its "
                "attention_block entry is NULL"),
            std::string::npos)
      << half.status().ToString();
}

struct BlockBugCase {
  const char* plugin;
  const char* name;
  Outcome outcome;
  const char* message;  // how the message on kBlocks[1] starts
};

const BlockBugCase kBlockBugs[] = {
    {ATTNKIT_EXAMPLE_PLUGIN_BLOCK_K_WITH_WV, "example_block_k_with_wv",
     Outcome::kKvCache, "k_cache[0,0,6,0] = "},
    {ATTNKIT_EXAMPLE_PLUGIN_BLOCK_Q_SLICE_OFF_BY_ONE,
     "example_block_q_slice_off_by_one", Outcome::kMismatch, ""},
};

// Planted block bugs in a plug-in are caught, in the process and isolated,
// and by the campaign a user runs (with a reproducer that replays them).
TEST(PluginTest, BlockBugsInAPluginAreCaught) {
  const AttentionBlockProblem p = Block(kBlocks[1]);
  const Case c = testing::BlockCase(p, 1);
  for (const BlockBugCase& bug : kBlockBugs) {
    SCOPED_TRACE(bug.name);
    auto b = plugin::LoadPlugin(bug.plugin);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_EQ((*b)->name(), bug.name);
    const CheckResult r = RunOne(c, **b);
    EXPECT_EQ(OutcomeName(r.outcome), OutcomeName(bug.outcome)) << r.message;
    EXPECT_EQ(r.message.rfind(bug.message, 0), 0u) << r.message;
    auto remote = backends::RemoteBackend::Start({"", bug.plugin});
    ASSERT_TRUE(remote.ok()) << remote.status().ToString();
    const CheckResult isolated = RunOne(c, **remote);
    EXPECT_EQ(OutcomeName(isolated.outcome), OutcomeName(bug.outcome))
        << isolated.message;

    Backend* one[] = {b->get()};
    const CampaignResult result = SmokeCampaign(one, 100);
    ASSERT_GT(result.failures, 0) << bug.name << " was never caught";
    const FailureReport& f = result.reports.front();
    EXPECT_TRUE(f.shrunk.is_block()) << f.shrunk.ToString();
    auto replay = ReplayCase(f.shrunk.ToString(), one);
    ASSERT_TRUE(replay.ok()) << replay.status().ToString();
    EXPECT_EQ(OutcomeName((*replay)[0].outcome), OutcomeName(f.result.outcome));
  }
}

TEST(PluginTest, UnsupportedProblemsAreSkippedWithThePluginsReason) {
  auto b = plugin::LoadPlugin(ATTNKIT_EXAMPLE_PLUGIN_SMALL);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)->name(), "example_small");
  Backend* one[] = {b->get()};
  auto c = ParseCase("seed=1,index=0,b=1,d=128,q=1,kv=3");
  ASSERT_TRUE(c.ok());
  auto r = RunCase(*c, one);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].outcome, Outcome::kSkipped);
  EXPECT_EQ((*r)[0].message,
            "UNIMPLEMENTED: plugin example_small: supports: head_dim=128 "
            "exceeds 64");
}

// A message that fills the whole buffer without a NUL is read up to the
// capacity the plug-in was given, never past it, and control characters
// (a terminal escape sequence) reach the report escaped.
TEST(PluginTest, AnUnterminatedEscapeLadenMessageIsBoundedAndSanitized) {
  auto b = plugin::LoadPlugin(ATTNKIT_EXAMPLE_PLUGIN_UNTERMINATED_MESSAGE);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  AttentionProblem p;
  p.head_dim = 128;
  const Status s = (*b)->Supports(p);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  const std::string& m = s.message();
  const std::string head =
      "plugin example_unterminated_message: supports: \\x1b[31mredAAA";
  EXPECT_EQ(m.rfind(head, 0), 0u) << m;
  // Every byte after the 8 the plug-in wrote first is one of its 'A's:
  // 1023 given, the last byte of the buffer stays the NUL.
  EXPECT_EQ(m.size(), head.size() - 3 + (1023 - 8)) << m.substr(0, 80);
  EXPECT_EQ(m.find_first_not_of('A', head.size()), std::string::npos);
  for (char ch : m) {
    EXPECT_TRUE(ch >= 0x20 && ch < 0x7f) << static_cast<int>(ch);
  }
}

TEST(PluginTest, AMissingFileIsNotFound) {
  auto b = plugin::LoadPlugin("/nonexistent/libnothing.so");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(b.status().message(),
            "plugin=/nonexistent/libnothing.so: no such file");
}

TEST(PluginTest, AFileThatIsNotASharedLibraryIsRefused) {
  auto b = plugin::LoadPlugin(ATTNKIT_NOT_A_PLUGIN);  // a static archive
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("cannot load it as a shared library"),
            std::string::npos)
      << b.status().message();
}

TEST(PluginTest, ALibraryWithoutTheEntryPointIsRefused) {
  auto b = plugin::LoadPlugin(ATTNKIT_EXAMPLE_PLUGIN_NO_ENTRY);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("does not export attnkit_plugin_v1"),
            std::string::npos)
      << b.status().message();
}

TEST(PluginTest, AnotherAbiVersionIsRefused) {
  auto b = plugin::LoadPlugin(ATTNKIT_EXAMPLE_PLUGIN_BAD_ABI);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("abi_version=99, this attnkit speaks 1"),
            std::string::npos)
      << b.status().message();
}

TEST(PluginTest, TheExamplePluginsAppendHookPassesDecodeLoops) {
  auto b = plugin::LoadPlugin(ATTNKIT_EXAMPLE_PLUGIN);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ExpectDecodeCasesPass(**b);
}

// A table built against the first v1 header ends before append_kv. The
// variant's table has the field (holding a hook that fails every append) but
// claims the shorter size: the loader must take it as absent and append
// with the portable copy.
TEST(PluginTest, ATableEndingBeforeAppendKvLoadsAndGetsThePortableAppend) {
  auto b = plugin::LoadPlugin(ATTNKIT_EXAMPLE_PLUGIN_FIRST_V1);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)->name(), "example_first_v1");
  ExpectDecodeCasesPass(**b);
}

TEST(PluginTest, AStructSizeShorterThanTheFirstV1TableIsRefused) {
  auto b = plugin::LoadPlugin(ATTNKIT_EXAMPLE_PLUGIN_TINY_TABLE);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find(
                "struct_size=16 is smaller than the first v1 table (" +
                std::to_string(ATTNKIT_PLUGIN_V1_BASE_SIZE) + " bytes)"),
            std::string::npos)
      << b.status().message();
}

struct AppendBugCase {
  const char* plugin;
  const char* name;
  const char* message;  // what the cache check says on kDecodeCases[0]
};

// kDecodeCases[0]: sequence 0's prompt is 6 - 2 = 4 tokens (positions 0..3)
// over 2 kv heads.
const AppendBugCase kAppendBugs[] = {
    {ATTNKIT_EXAMPLE_PLUGIN_APPEND_POSITION_OFF, "example_append_position_off",
     "step 0: k_cache[0,0,0,0] was never written"},
    {ATTNKIT_EXAMPLE_PLUGIN_APPEND_PAST_END, "example_append_past_end",
     "step 0: wrote k_cache[0,0,4,0] = "},
    {ATTNKIT_EXAMPLE_PLUGIN_APPEND_SKIPS_HEAD, "example_append_skips_head",
     "step 0: k_cache[0,1,0,0] was never written"},
};

// The hook is what the harness calls (a loader that fell back to the
// portable append would pass these), and the cache check pinpoints each bug.
TEST(PluginTest, EachAppendHookBugIsCaughtAtTheCacheElementItBreaks) {
  for (const AppendBugCase& bug : kAppendBugs) {
    auto b = plugin::LoadPlugin(bug.plugin);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_EQ((*b)->name(), bug.name);
    const CheckResult r = RunOne(CaseFrom(kDecodeCases[0]), **b);
    EXPECT_EQ(r.outcome, Outcome::kKvCache) << bug.name;
    EXPECT_EQ(r.step, 0) << bug.name;
    EXPECT_EQ(r.message.rfind(bug.message, 0), 0u)
        << bug.name << ": " << r.message;
  }
}

// The campaign a user runs: the smoke tier finds each bug, shrinks it and
// prints a reproducer that names the plug-in and replays the failure.
TEST(PluginTest, AppendHookBugsFailTheSmokeCampaignWithAReproducer) {
  for (const AppendBugCase& bug : kAppendBugs) {
    auto b = plugin::LoadPlugin(bug.plugin);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    Backend* one[] = {b->get()};
    const CampaignResult result = SmokeCampaign(one, 40);
    ASSERT_GT(result.failures, 0) << bug.name << " was never caught";
    const FailureReport& f = result.reports.front();
    EXPECT_EQ(f.result.outcome, Outcome::kKvCache) << bug.name;
    EXPECT_GT(f.shrunk.decode_steps, 0) << f.shrunk.ToString();
    const std::string plugins[] = {bug.plugin};
    const std::string repro = ReproducerCommand(f.shrunk, bug.name, plugins);
    EXPECT_NE(repro.find("--repro '" + f.shrunk.ToString() + "'"),
              std::string::npos)
        << repro;
    EXPECT_NE(repro.find("--plugin '" + std::string(bug.plugin) + "'"),
              std::string::npos)
        << repro;
    auto replay = ReplayCase(f.shrunk.ToString(), one);
    ASSERT_TRUE(replay.ok()) << replay.status().ToString();
    EXPECT_EQ((*replay)[0].outcome, Outcome::kKvCache) << bug.name;
  }
}

// The example_small variant's hook refuses head_dim > 64 as its supports()
// does; called directly (no supports() first), its error comes back as a
// Status naming the plug-in, the entry and the plug-in's message.
TEST(PluginTest, AnAppendHookErrorNamesThePluginAndItsMessage) {
  auto b = plugin::LoadPlugin(ATTNKIT_EXAMPLE_PLUGIN_SMALL);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  const std::array<int64_t, 4> shape{1, 1, 4, 128}, one{1, 1, 1, 128};
  Tensor kc = Tensor::Contiguous(DType::kF32, shape);
  Tensor vc = Tensor::Contiguous(DType::kF32, shape);
  Tensor nk = Tensor::Contiguous(DType::kF32, one);
  Tensor nv = Tensor::Contiguous(DType::kF32, one);
  int64_t positions[] = {3}, new_lens[] = {1};
  const KvAppendArgs a{kc.view, vc.view, nk.view, nv.view,
                       positions, new_lens, {},      {}};
  const Status s = (*b)->AppendKv(a);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "plugin example_small: append_kv: head_dim=128 exceeds 64");
  // An append that does not fit is refused before the hook sees it.
  positions[0] = 4;
  const Status full = (*b)->AppendKv(a);
  EXPECT_EQ(full.code(), StatusCode::kOutOfRange);
  EXPECT_NE(full.message().find("capacity=4"), std::string::npos)
      << full.message();
}

// The hook cannot report its copy itself (the ABI has no accounting); the
// loader charges it the bytes the contract lets it write, as the portable
// append charges its own.
TEST(PluginTest, TheAppendHookIsChargedTheNewTokensBytes) {
  auto b = plugin::LoadPlugin(ATTNKIT_EXAMPLE_PLUGIN);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  const std::array<int64_t, 4> shape{2, 3, 8, 5}, news{2, 3, 2, 5};
  Tensor kc = Tensor::Contiguous(DType::kBF16, shape);
  Tensor vc = Tensor::Contiguous(DType::kBF16, shape);
  Tensor nk = Tensor::Contiguous(DType::kBF16, news);
  Tensor nv = Tensor::Contiguous(DType::kBF16, news);
  const int64_t positions[] = {0, 6}, new_lens[] = {1, 2};
  accounting::Meter meter;
  ASSERT_TRUE((*b)->AppendKv({kc.view, vc.view, nk.view, nv.view, positions,
                              new_lens, {}, {}})
                  .ok());
  // (1 + 2) tokens * 3 heads * 5 elements * 2 bytes, K and V.
  EXPECT_EQ(meter.Read().bytes_copied, 2 * 3 * 3 * 5 * 2);
}

}  // namespace
}  // namespace attnkit::harness
