#include "harness/case.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <utility>
#include <vector>

#include "runtime/enum_table_testing.h"

namespace attnkit::harness {
namespace {

TEST(GenerateCaseTest, IsAFunctionOfSeedAndIndex) {
  for (Tier t : {Tier::kSmoke, Tier::kDefault, Tier::kLong}) {
    for (uint64_t i = 0; i < 200; ++i) {
      EXPECT_EQ(GenerateCase(t, 7, i).ToString(),
                GenerateCase(t, 7, i).ToString());
    }
  }
  // Different seeds and indices give different campaigns.
  int same_seed = 0, same_index = 0;
  for (uint64_t i = 0; i < 200; ++i) {
    const std::string a = GenerateCase(Tier::kDefault, 7, i).problem.ToString();
    same_seed += a == GenerateCase(Tier::kDefault, 8, i).problem.ToString();
    same_index +=
        a == GenerateCase(Tier::kDefault, 7, i + 1).problem.ToString();
  }
  EXPECT_LT(same_seed, 5);
  EXPECT_LT(same_index, 5);
}

TEST(GenerateCaseTest, DefaultTierCoversEveryEdge) {
  std::set<MaskKind> masks;
  std::set<DType> dtypes;
  std::set<KvLayout> layouts;
  std::set<ValueProfile> profiles;
  std::set<int64_t> ratios, dims, kvs;
  bool mqa = false, decode_loop = false, q_over_kv = false, zero_q = false,
       neg_scale = false, padded = false, odd_dim = false, ragged = false,
       big_batch = false, wide_window = false;
  for (uint64_t i = 0; i < 3000; ++i) {
    const Case c = GenerateCase(Tier::kDefault, 1, i);
    const AttentionProblem& p = c.problem;
    ASSERT_TRUE(ValidateCase(c).ok()) << c.ToString();
    masks.insert(p.mask);
    dtypes.insert(p.dtype);
    layouts.insert(p.layout);
    profiles.insert(c.profile);
    ratios.insert(p.group_size());
    dims.insert(p.head_dim);
    mqa |= p.kv_heads == 1 && p.q_heads > 1;
    decode_loop |= c.decode_steps > 0;
    neg_scale |= p.scale && *p.scale < 0;
    padded |= c.kv_pad > 0;
    odd_dim |= p.head_dim % 2 == 1 && p.head_dim > 64;
    big_batch |= p.batch == 8;
    wide_window |= p.mask == MaskKind::kWindow && p.window > p.max_kv_len();
    for (int64_t b = 0; b < p.batch; ++b) {
      kvs.insert(p.kv_lens[b]);
      q_over_kv |= p.q_lens[b] > p.kv_lens[b];
      zero_q |= p.q_lens[b] == 0;
      ragged |= p.kv_lens[b] != p.kv_lens[0];
    }
  }
  EXPECT_EQ(masks.size(), 4u);
  EXPECT_EQ(dtypes.size(), 2u);
  EXPECT_EQ(layouts.size(), 3u);
  EXPECT_EQ(profiles.size(), static_cast<size_t>(kNumValueProfiles));
  for (int64_t r : {1, 2, 4, 8}) EXPECT_TRUE(ratios.count(r)) << r;
  for (int64_t d : {1, 64, 80, 96, 128, 256}) EXPECT_TRUE(dims.count(d)) << d;
  for (int64_t n : {0, 1, 15, 17, 127, 129, 511, 512, 513, 509}) {
    EXPECT_TRUE(kvs.count(n)) << "kv_len " << n;
  }
  EXPECT_TRUE(mqa && decode_loop && q_over_kv && zero_q && neg_scale &&
              padded && odd_dim && ragged && big_batch && wide_window);
}

// A JIT backend compiles per (head_dim, dtype, mask, layout, group): blocks
// of consecutive cases share those, and the blocks differ.
TEST(GenerateCaseTest, BlocksOfCasesShareAKernelSpecialization) {
  auto spec = [](const Case& c) {
    const AttentionProblem& p = c.problem;
    return std::to_string(p.head_dim) + "/" + std::string(DTypeName(p.dtype)) +
           "/" + std::string(MaskKindName(p.mask)) + "/" +
           std::string(KvLayoutName(p.layout)) + "/" +
           std::to_string(p.group_size());
  };
  std::set<std::string> blocks;
  int same = 0, total = 0;
  for (uint64_t block = 0; block < 20; ++block) {
    const std::string first = spec(GenerateCase(Tier::kDefault, 3, block * 32));
    blocks.insert(first);
    for (uint64_t i = 1; i < 32; ++i) {
      same += spec(GenerateCase(Tier::kDefault, 3, block * 32 + i)) == first;
      ++total;
    }
  }
  // Only the size caps may change a case's head_dim or group.
  EXPECT_GT(same, total * 9 / 10);
  EXPECT_GE(blocks.size(), 18u);
}

TEST(GenerateCaseTest, TiersCapTheirSizes) {
  int64_t longest_smoke = 0, longest_long = 0;
  for (uint64_t i = 0; i < 1000; ++i) {
    const Case s = GenerateCase(Tier::kSmoke, 3, i);
    longest_smoke = std::max(longest_smoke, s.problem.max_kv_len());
    EXPECT_LE(s.Cost(), 2e5 * 5) << s.ToString();
    const Case l = GenerateCase(Tier::kLong, 3, i);
    longest_long = std::max(longest_long, l.problem.max_kv_len());
    ASSERT_TRUE(ValidateCase(l).ok()) << l.ToString();
  }
  EXPECT_LE(longest_smoke, 300 + 4 * 4);
  EXPECT_GE(longest_long, 16384);
}

TEST(CaseStringTest, RoundTripsExactly) {
  for (Tier t : {Tier::kSmoke, Tier::kDefault, Tier::kLong}) {
    for (uint64_t i = 0; i < 500; ++i) {
      const Case c = GenerateCase(t, 99, i);
      auto parsed = ParseCase(c.ToString());
      ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
      EXPECT_EQ(parsed->ToString(), c.ToString());
      EXPECT_EQ(parsed->problem.scale.has_value(), c.problem.scale.has_value());
      if (c.problem.scale) {
        EXPECT_EQ(*parsed->problem.scale, *c.problem.scale);
      }
    }
  }
}

TEST(CaseStringTest, LayoutsSharedBiasAndOriginsRoundTrip) {
  const std::string text =
      "seed=4,index=9,values=normal,pad=0,steps=0,q_layout=bshd:128,"
      "out_layout=bhsd:3,bias=shared,from=2:0,b=2,hq=4,hkv=2,d=32,q=1:1,"
      "kv=5:7,mask=bias,dtype=f32,layout=bhsd";
  auto c = ParseCase(text);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->io.q.token_major);
  EXPECT_EQ(c->io.q.pad, 128);
  EXPECT_FALSE(c->io.out.token_major);
  EXPECT_EQ(c->io.out.pad, 3);
  EXPECT_TRUE(c->io.shared_bias);
  EXPECT_EQ(c->origins, (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(c->ToString(), text);
  // The defaults are not written: old reproducers still parse the same.
  const Case plain = GenerateCase(Tier::kSmoke, 1, 0);
  Case copy = plain;
  copy.io = {};
  copy.origins.clear();
  EXPECT_EQ(copy.ToString().find("q_layout"), std::string::npos);
  for (const auto& [bad, field] :
       std::vector<std::pair<std::string, std::string>>{
           {"q_layout=bshd", "q_layout=bshd is not bhsd:PAD"},
           {"out_layout=xyz:1", "out_layout=xyz:1 is not"},
           {"q_layout=bhsd:2000000", "q_layout=bhsd:2000000 is not"},
           {"bias=some", "bias=some is not shared|heads"},
           {"from=1:x", "from=1:x is not"}}) {
    auto r =
        ParseCase("seed=1,index=0," + bad + ",b=2,d=4,q=1:1,kv=2:2,mask=bias");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(field), std::string::npos)
        << r.status().message();
  }
  auto no_bias = ParseCase("seed=1,index=0,bias=shared,b=1,d=4,q=1,kv=2");
  ASSERT_FALSE(no_bias.ok());
  EXPECT_NE(no_bias.status().message().find("bias=shared needs mask=bias"),
            std::string::npos);
  auto short_from = ParseCase("seed=1,index=0,from=3,b=2,d=4,q=1:1,kv=2:2");
  ASSERT_FALSE(short_from.ok());
  EXPECT_NE(short_from.status().message().find("from= names 1 sequence(s)"),
            std::string::npos);
}

// What the default tier must draw to reach the blind spots of its first
// version: wide heads, long contexts across each threshold, token-major
// and padded q/out, shared bias.
TEST(GenerateCaseTest, DefaultTierDrawsLongContextsWideHeadsAndLayouts) {
  int64_t wide = 0, shared = 0, token_major = 0, padded = 0;
  std::map<int64_t, int64_t> crossing;
  for (uint64_t i = 0; i < 1500; ++i) {
    const Case c = GenerateCase(Tier::kDefault, 1, i);
    wide += c.problem.head_dim > 256;
    shared += c.io.shared_bias;
    token_major += c.io.q.token_major || c.io.out.token_major;
    padded += c.io.q.pad > 0 || c.io.out.pad > 0;
    for (int64_t t : {4096, 8192, 16384, 65536}) {
      crossing[t] += c.problem.max_kv_len() > t;
    }
  }
  EXPECT_GT(wide, 20);
  EXPECT_GT(shared, 20);
  EXPECT_GT(token_major, 100);
  EXPECT_GT(padded, 100);
  for (int64_t t : {4096, 8192, 16384, 65536}) {
    EXPECT_GT(crossing[t], 0) << "no context crosses " << t;
  }
}

TEST(CaseStringTest, BadStringsNameTheField) {
  struct Bad {
    const char* text;
    const char* expect;
  };
  const Bad cases[] = {
      {"seed=x,index=1,b=1,q=1,kv=1", "seed=x is not an integer"},
      {"seed=1,b=1,q=1,kv=1", "missing index=N"},
      {"index=1,b=1,q=1,kv=1", "missing seed=N"},
      {"seed=1,index=1,values=loud,b=1,q=1,kv=1", "values=loud is not normal|"},
      {"seed=1,index=1", "missing the problem"},
      {"seed=1,index=1,b=1,q=1,kv=1,d=0", "head_dim=0 must be >= 1"},
      {"seed=1,index=1,steps=3,b=1,q=2,kv=5",
       "steps=3 of q_lens[0]=2 token(s) do not fit in kv_lens[0]=5"},
      {"seed=1,index=1,pad=9999999,b=1,q=1,kv=1", "pad=9999999 exceeds"},
  };
  for (const Bad& b : cases) {
    auto c = ParseCase(b.text);
    ASSERT_FALSE(c.ok()) << b.text;
    EXPECT_NE(c.status().message().find(b.expect), std::string::npos)
        << c.status().message();
  }
}

// steps * q_lens wrapped around to 0 (2^20 * 2^44 = 2^64) and let an
// impossible decode loop through.
TEST(CaseStringTest, StepsTimesQueriesThatOverflowDoNotValidate) {
  auto c = ParseCase(
      "seed=1,index=0,steps=1048576,b=1,hq=1,hkv=1,d=1,q=17592186044416,kv=1");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("(their product overflows int64)"),
            std::string::npos)
      << c.status().message();
  Case n;
  n.problem.q_lens = {1};
  n.problem.kv_lens = {1};
  n.kv_pad = -1;
  EXPECT_NE(ValidateCase(n).message().find("pad=-1 must be >= 0"),
            std::string::npos);
  n.kv_pad = 0;
  n.decode_steps = -2;
  EXPECT_NE(ValidateCase(n).message().find("steps=-2 must be >= 0"),
            std::string::npos);
}

TEST(CaseLimitsTest, WorkIsTheOracleMultiplyAddsOfEveryCall) {
  auto plain = ParseCase("seed=1,index=0,b=2,hq=4,hkv=2,d=8,q=3:1,kv=5:7");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(CaseWork(*plain), (3 * 5 + 1 * 7) * 4 * 8);
  // Decode loop: prompt 5 - 2*1 = 3; calls see 3 (1 query), 4 and 5 keys.
  auto loop = ParseCase("seed=1,index=0,steps=2,b=1,hq=2,hkv=1,d=4,q=1,kv=5");
  ASSERT_TRUE(loop.ok());
  double want = 0;
  for (int64_t s = 0; s <= 2; ++s) {
    const AttentionProblem p = DecodeStepProblem(*loop, s);
    want += static_cast<double>(p.q_lens[0] * p.kv_lens[0] * 2 * 4);
  }
  EXPECT_EQ(CaseWork(*loop), want);
}

TEST(CaseLimitsTest, MemoryCountsInputsOracleReferenceAndCaches) {
  auto c = ParseCase("seed=1,index=0,b=1,hq=1,hkv=1,d=1024,q=1,kv=2000000000");
  ASSERT_TRUE(c.ok());
  const MemoryEstimate e = CaseMemory(*c, 3);
  EXPECT_GE(e.total(), 2.0 * 2e9 * 1024 * 4);  // K and V alone
  const Status s = e.Check(int64_t{1} << 30, "the case");
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("inputs k+v"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("--max-memory=1073741824"), std::string::npos);

  // A decode loop holds one cache per backend on top of its inputs.
  auto loop = ParseCase("seed=1,index=0,steps=2,b=1,hq=2,hkv=1,d=4,q=1,kv=5");
  ASSERT_TRUE(loop.ok());
  EXPECT_GT(CaseMemory(*loop, 3).total(), CaseMemory(*loop, 1).total());
  // Every generated case fits a generous budget.
  for (uint64_t i = 0; i < 200; ++i) {
    const Case g = GenerateCase(Tier::kLong, 5, i);
    EXPECT_TRUE(CaseMemory(g, 4).Check(int64_t{4} << 30, "case").ok())
        << g.ToString();
  }
}

TEST(DecodeStepTest, StepsGrowTheContextFromThePrompt) {
  auto c = ParseCase(
      "seed=1,index=0,steps=3,b=2,hq=2,hkv=1,d=4,q=1:2,kv=5:6,mask=causal");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  // Prompts are 5 - 3*1 = 2 and 6 - 3*2 = 0.
  AttentionProblem s0 = DecodeStepProblem(*c, 0);
  EXPECT_EQ(s0.kv_lens, (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(s0.q_lens, (std::vector<int64_t>{1, 0}));
  AttentionProblem s3 = DecodeStepProblem(*c, 3);
  EXPECT_EQ(s3.kv_lens, (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(s3.q_lens, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(DecodeCapacity(*c), 6);
}

TEST(TierTest, ParsesNamesAndRejectsOthers) {
  EXPECT_EQ(*ParseTier("long"), Tier::kLong);
  auto bad = ParseTier("huge");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "tier=huge is not smoke|default|long");
}

TEST(TierTest, TableRoundTrips) {
  attnkit::testing::ExpectRoundTrip(kTierNames, "Tier");
}

}  // namespace
}  // namespace attnkit::harness
