#include "runtime/problem.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "runtime/random.h"

namespace attnkit {
namespace {

AttentionProblem Good() {
  AttentionProblem p;
  p.batch = 2;
  p.q_heads = 8;
  p.kv_heads = 2;
  p.head_dim = 64;
  p.q_lens = {3, 1};
  p.kv_lens = {17, 300};
  return p;
}

struct BadCase {
  const char* name;
  std::function<void(AttentionProblem&)> mutate;
  const char* expected_message;
};

TEST(ProblemValidateTest, GoodProblemIsOk) {
  EXPECT_TRUE(Good().Validate().ok()) << Good().Validate().ToString();
}

TEST(ProblemValidateTest, EveryBadFieldIsNamedWithItsValue) {
  const BadCase cases[] = {
      {"zero batch", [](auto& p) { p.batch = 0; }, "batch=0 must be >= 1"},
      {"negative q_heads", [](auto& p) { p.q_heads = -4; },
       "q_heads=-4 must be >= 1"},
      {"zero kv_heads", [](auto& p) { p.kv_heads = 0; },
       "kv_heads=0 must be >= 1"},
      {"kv_heads not dividing", [](auto& p) { p.kv_heads = 3; },
       "kv_heads=3 does not divide q_heads=8"},
      {"zero head_dim", [](auto& p) { p.head_dim = 0; },
       "head_dim=0 must be >= 1"},
      {"huge head_dim", [](auto& p) { p.head_dim = 1025; },
       "head_dim=1025 exceeds the maximum 1024"},
      {"q_lens size",
       [](auto& p) {
         p.q_lens = {1, 2, 3};
       },
       "q_lens has 3 entries but batch=2"},
      {"kv_lens size", [](auto& p) { p.kv_lens = {5}; },
       "kv_lens has 1 entries but batch=2"},
      {"negative q_len", [](auto& p) { p.q_lens[1] = -1; },
       "q_lens[1]=-1 must be >= 0"},
      {"negative kv_len", [](auto& p) { p.kv_lens[0] = -7; },
       "kv_lens[0]=-7 must be >= 0"},
      {"q_len > kv_len under causal",
       [](auto& p) {
         p.mask = MaskKind::kCausal;
         p.q_lens = {18, 1};
       },
       "q_lens[0]=18 exceeds kv_lens[0]=17 under mask=causal"},
      {"window zero",
       [](auto& p) {
         p.mask = MaskKind::kWindow;
         p.window = 0;
       },
       "window=0 must be >= 1 with mask=window"},
      {"window without window mask", [](auto& p) { p.window = 4; },
       "window=4 is only meaningful with mask=window (mask=none)"},
      {"nan scale",
       [](auto& p) { p.scale = std::numeric_limits<float>::quiet_NaN(); },
       "scale=nan must be finite, non-zero and at most 1e+06 in magnitude"},
      // Found by problem_validate_fuzz: a finite scale this large overflows
      // f32 logits for O(1) inputs and the softmax turns them into NaN.
      {"overflowing scale", [](auto& p) { p.scale = -3.39062583e+38f; },
       "scale=-3.39063e+38 must be finite, non-zero and at most 1e+06 in "
       "magnitude"},
      {"bad mask enum", [](auto& p) { p.mask = static_cast<MaskKind>(9); },
       "mask=9 is not a MaskKind"},
      {"bad dtype enum", [](auto& p) { p.dtype = static_cast<DType>(7); },
       "dtype=7 is not a DType"},
      {"64-bit overflow of q",
       [](auto& p) {
         p.batch = 1;
         p.q_lens = {int64_t{1} << 52};  // 8 * 2^52 * 64 * 4 = 2^63
         p.kv_lens = {1};
       },
       "size of q (batch*q_heads*max_q_len*head_dim*4) overflows int64"},
      {"64-bit overflow of scores",
       [](auto& p) {
         p.batch = 1;
         p.q_lens = {int64_t{1} << 40};
         p.kv_lens = {int64_t{1} << 40};
       },
       "size of scores (batch*q_heads*max_q_len*max_kv_len*4) overflows"},
  };
  for (const BadCase& c : cases) {
    AttentionProblem p = Good();
    c.mutate(p);
    const Status s = p.Validate();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.name;
    EXPECT_NE(s.message().find(c.expected_message), std::string::npos)
        << c.name << ": got '" << s.message() << "'";
  }
}

TEST(ProblemTest, DefaultScaleIsInverseSqrtHeadDim) {
  AttentionProblem p = Good();
  EXPECT_FLOAT_EQ(p.EffectiveScale(), 0.125f);
  p.scale = 0.5f;
  EXPECT_FLOAT_EQ(p.EffectiveScale(), 0.5f);
}

TEST(ProblemTest, GqaHeadMapping) {
  AttentionProblem p = Good();  // 8 q heads over 2 kv heads
  EXPECT_EQ(p.group_size(), 4);
  EXPECT_EQ(p.KvHeadOf(0), 0);
  EXPECT_EQ(p.KvHeadOf(3), 0);
  EXPECT_EQ(p.KvHeadOf(4), 1);
  EXPECT_EQ(p.KvHeadOf(7), 1);
}

TEST(ProblemTest, CausalIsAlignedToTheEndOfTheContext) {
  AttentionProblem p = Good();
  p.mask = MaskKind::kCausal;
  p.q_lens = {3, 1};
  p.kv_lens = {5, 9};
  // Query i sees keys j <= kv_len - q_len + i.
  EXPECT_EQ(VisibleKeys(p, 0, 0).end, 3);
  EXPECT_EQ(VisibleKeys(p, 0, 2).end, 5);
  // Decode: the single query sees the whole context.
  EXPECT_EQ(VisibleKeys(p, 1, 0).begin, 0);
  EXPECT_EQ(VisibleKeys(p, 1, 0).end, 9);
}

TEST(ProblemTest, WindowSeesTheLastWPositions) {
  AttentionProblem p = Good();
  p.mask = MaskKind::kWindow;
  p.window = 4;
  p.q_lens = {3, 1};
  p.kv_lens = {10, 2};
  const KeyRange r = VisibleKeys(p, 0, 1);  // position 8
  EXPECT_EQ(r.begin, 5);
  EXPECT_EQ(r.end, 9);
  EXPECT_EQ(VisibleKeys(p, 1, 0).begin, 0);  // window longer than context
  EXPECT_EQ(VisibleKeys(p, 1, 0).end, 2);
}

TEST(ProblemTest, NoneAndBiasSeeEverything) {
  AttentionProblem p = Good();
  EXPECT_EQ(VisibleKeys(p, 0, 0).end, 17);
  p.kv_lens = {0, 300};
  EXPECT_TRUE(VisibleKeys(p, 0, 0).empty());
}

TEST(ProblemTest, FlopsCountOnlyVisiblePairs) {
  AttentionProblem p;
  p.head_dim = 4;
  p.q_lens = {2};
  p.kv_lens = {2};
  p.mask = MaskKind::kCausal;
  // Visible pairs: (0,0), (1,0), (1,1) = 3; 4 flops per pair per dim.
  EXPECT_DOUBLE_EQ(p.Flops(), 3 * 4 * 4);
}

TEST(ProblemTest, FlopsClosedFormMatchesCountingEveryPair) {
  Rng rng(77);
  for (int n = 0; n < 200; ++n) {
    AttentionProblem p;
    p.batch = rng.Range(1, 3);
    p.head_dim = 2;
    p.mask = static_cast<MaskKind>(rng.Range(0, 3));
    if (p.mask == MaskKind::kWindow) p.window = rng.Range(1, 12);
    p.q_lens.clear();
    p.kv_lens.clear();
    double pairs = 0;
    for (int64_t b = 0; b < p.batch; ++b) {
      p.kv_lens.push_back(rng.Range(0, 20));
      p.q_lens.push_back(rng.Range(0, p.kv_lens.back()));
    }
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t i = 0; i < p.q_lens[b]; ++i) {
        const KeyRange r = VisibleKeys(p, b, i);
        pairs += static_cast<double>(r.end - r.begin);
      }
    ASSERT_DOUBLE_EQ(p.Flops(), 4 * pairs * 2) << p.ToString();
  }
}

// Flops() must not visit every query row: a valid problem with billions of
// rows would hang (a case problem_validate_fuzz found).
TEST(ProblemTest, FlopsOfHugeProblemsIsExact) {
  AttentionProblem p;
  p.head_dim = 1;
  const int64_t n = int64_t{1} << 28;
  p.q_lens = {n};
  p.kv_lens = {n};
  p.mask = MaskKind::kCausal;
  ASSERT_TRUE(p.Validate().ok());
  // n (n + 1) / 2 visible pairs, 4 flops each.
  EXPECT_EQ(p.Flops(),
            2.0 * static_cast<double>(n) * static_cast<double>(n + 1));
}

TEST(ProblemTest, ToStringRoundTrips) {
  AttentionProblem p = Good();
  p.mask = MaskKind::kWindow;
  p.window = 5;
  p.scale = 0.3f;
  p.dtype = DType::kBF16;
  p.layout = KvLayout::kTransposedV;
  const std::string s = p.ToString();
  EXPECT_EQ(
      s,
      "b=2,hq=8,hkv=2,d=64,q=3:1,kv=17:300,mask=window:5,scale=0.300000012,"
      "dtype=bf16,layout=tv");
  StatusOr<AttentionProblem> back = ParseProblem(s);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->ToString(), s);
  EXPECT_EQ(*back->scale, 0.3f);
}

TEST(ProblemTest, ParseErrorsNameTheItem) {
  EXPECT_NE(ParseProblem("b=2,hq=x")
                .status()
                .message()
                .find("hq=x is not an integer"),
            std::string::npos);
  EXPECT_NE(
      ParseProblem("b=1,zz=3").status().message().find("unknown key 'zz'"),
      std::string::npos);
  EXPECT_NE(ParseProblem("b=1,mask=diag").status().message().find("mask=diag"),
            std::string::npos);
  EXPECT_NE(
      ParseProblem("b=1,layout=hbsd").status().message().find("layout=hbsd"),
      std::string::npos);
  // Lengths are required (never defaulted from an untrusted batch size).
  EXPECT_NE(ParseProblem("b=1000000000000000,kv=1")
                .status()
                .message()
                .find("missing q="),
            std::string::npos);
  EXPECT_NE(ParseProblem("q=1").status().message().find("missing kv="),
            std::string::npos);
  // Without b=, the batch is the number of sequences.
  StatusOr<AttentionProblem> p = ParseProblem("q=1:2:3,kv=4:5:6");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->batch, 3);
  EXPECT_TRUE(p->Validate().ok());
}

class ValidateArgsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    p_ = Good();
    p_.mask = MaskKind::kBias;
    auto d = AttentionData::Create(p_);
    ASSERT_TRUE(d.ok());
    data_ = std::move(d).value();
  }
  AttentionProblem p_;
  AttentionData data_;
};

TEST_F(ValidateArgsTest, GeneratedDataIsValid) {
  EXPECT_TRUE(ValidateArgs(p_, data_.args()).ok());
}

TEST_F(ValidateArgsTest, MismatchedBiasShape) {
  AttentionArgs a = data_.args();
  a.bias.shape[1] = 3;
  EXPECT_NE(ValidateArgs(p_, a).message().find(
                "bias: shape[1]=3 must be 1 or q_heads=8"),
            std::string::npos);
  a = data_.args();
  a.bias.shape[3] = 10;
  EXPECT_NE(ValidateArgs(p_, a).message().find("bias: shape[3]=10"),
            std::string::npos);
}

TEST_F(ValidateArgsTest, WrongDtypeShapeStrideAndNull) {
  AttentionArgs a = data_.args();
  a.k.dtype = DType::kBF16;
  EXPECT_NE(ValidateArgs(p_, a).message().find("k: dtype=bf16, expected f32"),
            std::string::npos);
  a = data_.args();
  a.v.shape[2] = 299;
  EXPECT_NE(ValidateArgs(p_, a).message().find(
                "v: shape[2]=299 is shorter than the longest length 300"),
            std::string::npos);
  a = data_.args();
  a.q.strides[3] = 2;
  EXPECT_NE(ValidateArgs(p_, a).message().find(
                "q: strides[3]=2 must be 1 for this layout"),
            std::string::npos);
  a = data_.args();
  a.out.data = nullptr;
  EXPECT_NE(ValidateArgs(p_, a).message().find("out: data is null"),
            std::string::npos);
  a = data_.args();
  p_.mask = MaskKind::kNone;
  EXPECT_NE(ValidateArgs(p_, a).message().find("bias: given but mask=none"),
            std::string::npos);
}

TEST(KvStridesTest, LayoutsPutTheRightDimInnermost) {
  const std::array<int64_t, 4> shape{2, 4, 16, 8};
  EXPECT_EQ(KvStrides(KvLayout::kBHSD, true, shape)[3], 1);
  EXPECT_EQ(KvStrides(KvLayout::kBSHD, false, shape)[1], 8);
  EXPECT_EQ(KvStrides(KvLayout::kBSHD, false, shape)[2], 32);
  EXPECT_EQ(KvStrides(KvLayout::kTransposedV, false, shape)[3], 1);
  EXPECT_EQ(KvStrides(KvLayout::kTransposedV, true, shape)[2], 1);
  EXPECT_EQ(KvStrides(KvLayout::kTransposedV, true, shape)[3], 16);
}

// The quantized cache's vocabulary: kv_dtype=i8 (q f32 or bf16), its string
// form, what Validate refuses, and the scale views and values.
TEST(ProblemTest, I8KvDtypeValidatesAndRoundTrips) {
  AttentionProblem p = Good();
  p.dtype = DType::kBF16;
  p.kv_dtype = DType::kI8;
  ASSERT_TRUE(p.Validate().ok()) << p.Validate().ToString();
  EXPECT_TRUE(p.quantized_kv());
  EXPECT_EQ(p.KvDType(), DType::kI8);
  const std::string s = p.ToString();
  EXPECT_NE(s.find(",dtype=bf16,kv_dtype=i8,"), std::string::npos) << s;
  StatusOr<AttentionProblem> back = ParseProblem(s);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->ToString(), s);

  p.kv_dtype = DType::kF32;  // neither q's dtype nor i8
  EXPECT_NE(p.Validate().message().find("kv_dtype=f32 differs from dtype=bf16"),
            std::string::npos)
      << p.Validate().message();
  p = Good();
  p.dtype = DType::kI8;
  EXPECT_NE(p.Validate().message().find("dtype=i8 is a K/V storage only"),
            std::string::npos)
      << p.Validate().message();
  EXPECT_NE(ParseProblem("q=1,kv=1,kv_dtype=i4")
                .status()
                .message()
                .find("kv_dtype=i4"),
            std::string::npos);
}

TEST(ProblemTest, I8ScalesAreCheckedInShapeAndValue) {
  AttentionProblem p = Good();
  p.kv_dtype = DType::kI8;
  auto d = AttentionData::Create(p);
  ASSERT_TRUE(d.ok());
  Rng rng(3);
  d->Fill(p, rng, ValueProfile::kNormal, {});
  const AttentionArgs& good = d->args();
  ASSERT_TRUE(ValidateArgs(p, good).ok()) << ValidateArgs(p, good).ToString();
  EXPECT_TRUE(CheckKvScaleValues(p, good.k_scale, good.v_scale).ok());

  AttentionArgs a = good;
  a.v_scale = {};
  EXPECT_NE(ValidateArgs(p, a).message().find("v_scale: missing"),
            std::string::npos)
      << ValidateArgs(p, a).message();
  a = good;
  a.k_scale.shape[2] = 16;
  EXPECT_NE(ValidateArgs(p, a).message().find("k_scale: shape[2]=16"),
            std::string::npos)
      << ValidateArgs(p, a).message();
  a = good;
  a.k.dtype = DType::kF32;
  EXPECT_NE(ValidateArgs(p, a).message().find("k: dtype=f32, expected i8"),
            std::string::npos)
      << ValidateArgs(p, a).message();
  // Scales given with unquantized K/V.
  AttentionProblem plain = Good();
  auto e = AttentionData::Create(plain);
  ASSERT_TRUE(e.ok());
  a = e->args();
  a.k_scale = good.k_scale;
  EXPECT_NE(
      ValidateArgs(plain, a).message().find("k_scale: given but k is f32"),
      std::string::npos)
      << ValidateArgs(plain, a).message();

  // Values: a scale a row reads must be finite and positive; the error
  // names the tensor and the element.
  d->k_scale().view.Store(1, 0, 250, 0, 0.0f);
  Status s = CheckKvScaleValues(p, good.k_scale, good.v_scale);
  EXPECT_NE(s.message().find("k_scale[1,0,250]=0 must be finite and positive"),
            std::string::npos)
      << s.message();
  d->k_scale().view.Store(1, 0, 250, 0, 1.0f);
  d->v_scale().view.Store(0, 1, 3, 0, std::numeric_limits<float>::quiet_NaN());
  s = CheckKvScaleValues(p, good.k_scale, good.v_scale);
  EXPECT_NE(s.message().find("v_scale[0,1,3]=nan"), std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace attnkit
