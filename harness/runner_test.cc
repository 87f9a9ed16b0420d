#include "harness/runner.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <stdexcept>

#include "harness/campaign.h"
#include "harness/canaries.h"
#include "harness/test_support.h"
#include "reference/attention_block.h"
#include "reference/reference.h"
#include "runtime/enum_table_testing.h"

namespace attnkit::harness {
namespace {

// The reference, then a hook that may damage what it wrote.
class Wrapped final : public Backend {
 public:
  using Hook =
      std::function<Status(const AttentionProblem&, const AttentionArgs&)>;
  Wrapped(Hook after, Status supports = Status::Ok())
      : after_(std::move(after)), supports_(std::move(supports)) {}
  std::string_view name() const override { return "wrapped"; }
  Status Supports(const AttentionProblem&) const override { return supports_; }
  Status Attention(const AttentionProblem& p,
                   const AttentionArgs& args) override {
    ATTNKIT_RETURN_IF_ERROR(reference::Attention(p, args));
    return after_(p, args);
  }

 private:
  Hook after_;
  Status supports_;
};

using testing::CaseFrom;
using testing::RunOne;

TEST(RunnerTest, TheReferencePassesPlainAndDecodeCases) {
  auto ref = reference::MakeReferenceBackend();
  for (uint64_t i = 0; i < 60; ++i) {
    const Case c = GenerateCase(Tier::kSmoke, 5, i);
    const CheckResult r = RunOne(c, *ref);
    EXPECT_EQ(r.outcome, Outcome::kPass) << c.ToString() << " " << r.message;
    // Its error is the naive error itself: at most 1/1.5 of the mean bound.
    EXPECT_LE(r.ratio, 1 / 1.5 + 1e-9);
  }
  const CheckResult d = RunOne(
      CaseFrom("seed=3,index=1,steps=4,b=3,hq=4,hkv=2,d=9,q=1:0:2,kv=5:3:8,"
               "mask=bias,dtype=bf16,layout=bshd"),
      *ref);
  EXPECT_EQ(d.outcome, Outcome::kPass) << d.message;
  // A loop with nothing in it (q = kv = 0): a one-slot cache, never written
  // (the fuzzer's seed=1298746443,index=25972 was rejected as "capacity=0").
  const CheckResult empty =
      RunOne(CaseFrom("seed=1,index=0,steps=1,b=1,hq=4,hkv=2,d=16,q=0,kv=0,"
                      "mask=bias,layout=bshd"),
             *ref);
  EXPECT_EQ(empty.outcome, Outcome::kPass) << empty.message;
}

// The reference block, then a hook that may damage what its n-th call
// wrote (calls count from 1).
class WrappedBlock final : public Backend {
 public:
  using Hook = std::function<void(int, const AttentionBlockArgs&)>;
  explicit WrappedBlock(Hook after) : after_(std::move(after)) {}
  std::string_view name() const override { return "wrapped_block"; }
  Status Attention(const AttentionProblem& p,
                   const AttentionArgs& args) override {
    return reference::Attention(p, args);
  }
  Status SupportsBlock(const AttentionBlockProblem& p) const override {
    return p.Validate();
  }
  Status AttentionBlock(const AttentionBlockProblem& p,
                        const AttentionBlockArgs& a) override {
    ATTNKIT_RETURN_IF_ERROR(reference::AttentionBlock(p, a));
    after_(++calls_, a);
    return Status::Ok();
  }

 private:
  Hook after_;
  int calls_ = 0;
};

// A block decode loop: each step projects its new tokens into the slots
// after the previous step's and attends over everything before; every step
// is judged (a damaged third step fails the case, named).
TEST(RunnerTest, ABlockDecodeLoopJudgesEveryStep) {
  const Case c = CaseFrom(
      "seed=2,index=7,values=normal,pad=0,steps=3,block=33:bf16:1:1,b=2,hq=4,"
      "hkv=2,d=8,q=1:2,kv=9:6,mask=causal,dtype=f32,layout=bshd");
  ASSERT_TRUE(c.is_block());
  auto ref = reference::MakeReferenceBackend();
  const CheckResult good = RunOne(c, *ref);
  EXPECT_EQ(good.outcome, Outcome::kPass) << good.message;
  int steps = 0;
  WrappedBlock counted([&](int, const AttentionBlockArgs&) { ++steps; });
  EXPECT_EQ(RunOne(c, counted).outcome, Outcome::kPass);
  EXPECT_EQ(steps, 3);
  WrappedBlock third([](int call, const AttentionBlockArgs& a) {
    if (call == 3) a.out.Store(1, 0, 1, 5, a.out.Load(1, 0, 1, 5) + 0.25f);
  });
  const CheckResult bad = RunOne(c, third);
  EXPECT_EQ(bad.outcome, Outcome::kMismatch) << bad.message;
  EXPECT_NE(bad.message.find("decode step 3 of 3"), std::string::npos)
      << bad.message;
  // A slot of step 2 written wrong is in the cache step 3 attends over:
  // caught at step 2 already, bit for bit outside the slots.
  WrappedBlock slot([](int call, const AttentionBlockArgs& a) {
    if (call == 2) a.k_cache.Store(0, 1, 7, 0, 1e3f);
  });
  const CheckResult wrote = RunOne(c, slot);
  EXPECT_EQ(wrote.outcome, Outcome::kKvCache) << wrote.message;
  EXPECT_NE(wrote.message.find("decode step 2 of 3"), std::string::npos)
      << wrote.message;
}

// A block case with nothing in it (no token, no context: x and the caches
// hold no element) runs and passes; restoring its empty inputs between
// backends must not hand memcpy a null pointer (UBSan in the asan preset).
TEST(RunnerTest, AnEmptyBlockCasePasses) {
  const Case c = CaseFrom(
      "seed=1,index=0,values=normal,pad=0,steps=0,block=7:f32:1:1,b=1,hq=2,"
      "hkv=1,d=4,q=0,kv=0,mask=none,dtype=f32,layout=bhsd");
  ASSERT_TRUE(c.is_block());
  auto ref = reference::MakeReferenceBackend();
  Backend* twice[] = {ref.get(), ref.get()};
  auto r = RunCase(c, twice);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const CheckResult& x : *r)
    EXPECT_EQ(x.outcome, Outcome::kPass) << x.message;
}

TEST(RunnerTest, AnUnsupportedProblemIsSkippedNotFailed) {
  Wrapped b([](auto&, auto&) { return Status::Ok(); },
            Status::Unimplemented("head_dim=9 needs a multiple of 8"));
  const CheckResult r = RunOne(CaseFrom("seed=1,index=0,b=1,d=9,q=2,kv=3"), b);
  EXPECT_EQ(r.outcome, Outcome::kSkipped);
  EXPECT_FALSE(r.failed());
  EXPECT_NE(r.message.find("head_dim=9 needs"), std::string::npos);
}

TEST(RunnerTest, ErrorsAndExceptionsOnSupportedProblemsFail) {
  Wrapped err([](auto&, auto&) { return Status::Internal("oops"); });
  const Case c = CaseFrom("seed=1,index=0,b=1,d=4,q=2,kv=3");
  CheckResult r = RunOne(c, err);
  EXPECT_EQ(r.outcome, Outcome::kError);
  EXPECT_EQ(r.message, "INTERNAL: oops");
  Wrapped thrower([](auto&, auto&) -> Status {
    throw std::runtime_error("bad_alloc-ish");
  });
  r = RunOne(c, thrower);
  EXPECT_EQ(r.outcome, Outcome::kError);
  EXPECT_NE(r.message.find("bad_alloc-ish"), std::string::npos);
}

TEST(RunnerTest, WritingPastQLenIsAStrayWrite) {
  // Sequence 1 has q_len 1, so row 1 of it belongs to nobody.
  Wrapped b([](const AttentionProblem&, const AttentionArgs& a) {
    a.out.Store(1, 0, 1, 0, 0.0f);
    return Status::Ok();
  });
  const CheckResult r =
      RunOne(CaseFrom("seed=1,index=0,b=2,d=4,q=2:1,kv=3:3"), b);
  EXPECT_EQ(r.outcome, Outcome::kStrayWrite);
  EXPECT_NE(r.message.find("wrote out[1,0,1,0]"), std::string::npos)
      << r.message;
}

TEST(RunnerTest, WritingOutsPaddingIsAStrayWrite) {
  // out rows are 4 + 6 floats apart, the view starting 3 floats in: the
  // element before the first row is padding, nobody's.
  Wrapped b([](const AttentionProblem&, const AttentionArgs& a) {
    a.out.As<float>()[-1] = 0.0f;
    return Status::Ok();
  });
  const CheckResult r =
      RunOne(CaseFrom("seed=1,index=0,out_layout=bhsd:6,b=1,d=4,q=2,kv=3"), b);
  EXPECT_EQ(r.outcome, Outcome::kStrayWrite);
  EXPECT_NE(r.message.find("wrote out's padding at element 2"),
            std::string::npos)
      << r.message;
}

TEST(RunnerTest, WritingAnInputIsItsOwnFailureAndIsUndoneForTheNext) {
  // Writes K past the sequence's length (the capacity row pad= adds) and
  // q's padding: both inputs, read-only.
  for (const char* where : {"k", "q"}) {
    Wrapped b([where](const AttentionProblem& p, const AttentionArgs& a) {
      if (where[0] == 'k') {
        a.k.Store(0, 0, p.kv_lens[0], 0, 0.0f);
      } else {
        const_cast<float*>(a.q.As<float>())[-1] = 1.0f;
      }
      return Status::Ok();
    });
    auto ref = reference::MakeReferenceBackend();
    Backend* both[] = {&b, ref.get()};
    auto r = RunCase(
        CaseFrom("seed=1,index=0,pad=2,steps=0,q_layout=bshd:4,b=1,d=4,q=2,"
                 "kv=3"),
        both);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ((*r)[0].outcome, Outcome::kInputWrite) << where;
    EXPECT_NE((*r)[0].message.find(std::string("wrote ") + where),
              std::string::npos)
        << (*r)[0].message;
    // Restored: the next backend sees the inputs as drawn and passes.
    EXPECT_EQ((*r)[1].outcome, Outcome::kPass) << (*r)[1].message;
  }
}

// The bound of a case is a function of the case alone: recomputed after
// the heap moved (the naive reference's workspace lands elsewhere) and from
// the case's string, as --repro does, it is the same to the bit.
TEST(RunnerTest, ACaseHasTheSameBoundWhereverItRuns) {
  auto ref = reference::MakeReferenceBackend();
  Backend* one[] = {ref.get()};
  std::vector<std::vector<char>> ballast;
  for (uint64_t i = 0; i < 60; ++i) {
    const Case c = GenerateCase(Tier::kDefault, 3, i * 7);
    auto first = RunCase(c, one);
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    ballast.emplace_back(1 + (i * 977) % 4093);  // shifts later allocations
    auto again = ReplayCase(c.ToString(), one);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ((*first)[0].bounds.max_abs, (*again)[0].bounds.max_abs)
        << c.ToString();
    EXPECT_EQ((*first)[0].bounds.mean_abs, (*again)[0].bounds.mean_abs)
        << c.ToString();
    EXPECT_EQ((*first)[0].ratio, (*again)[0].ratio) << c.ToString();
  }
}

TEST(RunnerTest, AFullyMaskedRowLeftUnwrittenIsCaught) {
  // kv_len 0: the row must be zeros; leaving the sentinel in is a NaN.
  Wrapped b([](const AttentionProblem&, const AttentionArgs& a) {
    for (int64_t e = 0; e < 4; ++e) {
      a.out.Store(0, 0, 0, e, std::numeric_limits<float>::quiet_NaN());
    }
    return Status::Ok();
  });
  const CheckResult r = RunOne(CaseFrom("seed=1,index=0,b=1,d=4,q=1,kv=0"), b);
  EXPECT_EQ(r.outcome, Outcome::kNonFinite);
  EXPECT_EQ(r.error.nonfinite, 4);
}

TEST(RunnerTest, ASmallErrorBeyondTheBoundIsAMismatch) {
  Wrapped b([](const AttentionProblem&, const AttentionArgs& a) {
    a.out.Store(0, 1, 2, 3, a.out.Load(0, 1, 2, 3) * (1 + 1e-4f));
    return Status::Ok();
  });
  const CheckResult r =
      RunOne(CaseFrom("seed=1,index=0,b=1,hq=2,hkv=1,d=8,q=3,kv=40"), b);
  EXPECT_EQ(r.outcome, Outcome::kMismatch);
  EXPECT_EQ(r.error.mismatched, 1);
  EXPECT_EQ(r.error.max_abs_index, (std::array<int64_t, 4>{0, 1, 2, 3}));
  EXPECT_GT(r.ratio, 1);
}

TEST(RunnerTest, DecodeLoopChecksTheCacheBitExactly) {
  auto spill = MakeCanary(Bug::kAppendSpill);
  const Case c = CaseFrom(
      "seed=2,index=4,steps=3,b=2,hq=2,hkv=2,d=5,q=1:1,kv=4:6,mask=causal,"
      "dtype=bf16,layout=tv");
  const CheckResult r = RunOne(c, *spill);
  EXPECT_EQ(r.outcome, Outcome::kKvCache);
  EXPECT_EQ(r.step, 0);
  EXPECT_NE(r.message.find("past the sequence's length"), std::string::npos)
      << r.message;
  // The same loop with a correct append passes every step.
  auto fine = MakeCanary(Bug::kNone);
  EXPECT_EQ(RunOne(c, *fine).outcome, Outcome::kPass);
}

// An append that drops the low bit of the last new element: only the
// bit-exact cache comparison can see it.
class LossyAppend final : public Backend {
 public:
  std::string_view name() const override { return "lossy"; }
  Status Attention(const AttentionProblem& p, const AttentionArgs& a) override {
    return reference::Attention(p, a);
  }
  Status AppendKv(const KvAppendArgs& a) override {
    ATTNKIT_RETURN_IF_ERROR(ValidateAppend(a));
    AppendKvStrided(a);
    if (a.new_lens[0] > 0) {
      auto* f = static_cast<float*>(a.v_cache.data) +
                a.v_cache.Offset(0, 0, a.positions[0], 0);
      uint32_t bits;
      std::memcpy(&bits, f, 4);
      bits ^= 1;
      std::memcpy(f, &bits, 4);
    }
    return Status::Ok();
  }
};

TEST(RunnerTest, DecodeLoopCatchesAOneUlpCacheCorruption) {
  LossyAppend lossy;
  const CheckResult r = RunOne(
      CaseFrom("seed=2,index=4,steps=2,b=1,d=3,q=1,kv=3,dtype=f32"), lossy);
  EXPECT_EQ(r.outcome, Outcome::kKvCache);
  EXPECT_NE(r.message.find("v_cache[0,0,0,0]"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("bit-exact"), std::string::npos);
}

// The portable append plus one stray write per sequence just past its new
// tokens, of what a buggy kernel puts there.
class StrayAppend final : public Backend {
 public:
  enum class What : uint8_t {
    kZeros,       // "clears" the next slot
    kStagingRow,  // a `t <= n` loop: the staging row after the last token
  };
  explicit StrayAppend(What what) : what_(what) {}
  std::string_view name() const override { return "stray_append"; }
  Status Attention(const AttentionProblem& p, const AttentionArgs& a) override {
    return reference::Attention(p, a);
  }
  Status AppendKv(const KvAppendArgs& a) override {
    ATTNKIT_RETURN_IF_ERROR(ValidateAppend(a));
    AppendKvStrided(a);
    for (int64_t b = 0; b < a.k_cache.shape[0]; ++b) {
      const int64_t n = a.new_lens[b], end = a.positions[b] + n;
      // Only where the staging row exists and the cache has room.
      if (end >= a.k_cache.shape[2] || n >= a.new_k.shape[2]) continue;
      for (int64_t h = 0; h < a.k_cache.shape[1]; ++h)
        for (int64_t e = 0; e < a.k_cache.shape[3]; ++e) {
          a.k_cache.Store(
              b, h, end, e,
              what_ == What::kZeros ? 0.0f : a.new_k.Load(b, h, n, e));
        }
    }
    return Status::Ok();
  }

 private:
  What what_;
};

// The cache starts as a nonzero fill and the staging rows past a sequence's
// new_len as another: writing zeros, or copying a row past new_len, changes
// a byte the check compares (zero-filled buffers would hide both).
TEST(RunnerTest, DecodeLoopCatchesWritesOfZerosOrStagingPaddingPastTheEnd) {
  // Sequence 1 appends fewer tokens than sequence 0 at step 0 (prompts 5
  // and 2), so its staging row 2 is padding.
  const Case c = CaseFrom(
      "seed=2,index=4,steps=1,b=2,hq=2,hkv=2,d=3,q=1:1,"
      "kv=6:3,dtype=f32,layout=bshd");
  for (auto what :
       {StrayAppend::What::kZeros, StrayAppend::What::kStagingRow}) {
    StrayAppend stray(what);
    const CheckResult r = RunOne(c, stray);
    EXPECT_EQ(r.outcome, Outcome::kKvCache);
    EXPECT_EQ(r.step, 0);
    EXPECT_NE(r.message.find("past the sequence's length"), std::string::npos)
        << r.message;
  }
  // The staging padding is only in sequence 1: the message names it.
  StrayAppend staging(StrayAppend::What::kStagingRow);
  EXPECT_NE(RunOne(c, staging).message.find("wrote k_cache[1,0,2,0]"),
            std::string::npos);
}

TEST(RunnerTest, ValuesAreReproducibleFromTheCase) {
  // Two runs of the same failing case give bit-identical error statistics.
  auto canary = MakeCanary(Bug::kMissingRescale);
  const Case c =
      CaseFrom("seed=9,index=3,values=huge_logits,b=1,hq=1,d=16,q=4,kv=100");
  const CheckResult a = RunOne(c, *canary), b = RunOne(c, *canary);
  EXPECT_EQ(a.outcome, Outcome::kMismatch);
  EXPECT_EQ(a.error.max_abs, b.error.max_abs);
  EXPECT_EQ(a.error.mean_abs, b.error.mean_abs);
}

TEST(OutcomeTest, TableRoundTrips) {
  attnkit::testing::ExpectRoundTrip(kOutcomeNames, "Outcome");
}

}  // namespace
}  // namespace attnkit::harness
