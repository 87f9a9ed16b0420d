#include "backends/remote.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "harness/test_support.h"
#include "plugin/loader.h"
#include "runtime/accounting.h"
#include "runtime/attention_block.h"
#include "runtime/random.h"
#include "runtime/shared_memory.h"

namespace attnkit::backends {
namespace {

// The example plug-in's misbehaving build: ATTNKIT_TEST_MISBEHAVE (read by
// the worker, which inherits the environment at start) says what it does.
const std::string kPlugin = ATTNKIT_EXAMPLE_PLUGIN_MISBEHAVE;

class Misbehave {
 public:
  explicit Misbehave(const char* spec) {
    setenv("ATTNKIT_TEST_MISBEHAVE", spec, 1);
  }
  ~Misbehave() { unsetenv("ATTNKIT_TEST_MISBEHAVE"); }
};

AttentionProblem Problem() {
  AttentionProblem p;
  p.batch = 2;
  p.q_heads = 4;
  p.kv_heads = 2;
  p.head_dim = 16;
  p.q_lens = {3, 1};
  p.kv_lens = {7, 5};
  p.mask = MaskKind::kCausal;
  return p;
}

// The tensors of Problem(), filled with fixed values; out starts as NaN.
struct Data {
  explicit Data(const AttentionProblem& p) {
    q = Tensor::Contiguous(p.dtype, {p.batch, p.q_heads, 3, p.head_dim});
    k = Tensor::Contiguous(p.dtype, {p.batch, p.kv_heads, 7, p.head_dim});
    v = Tensor::Contiguous(p.dtype, {p.batch, p.kv_heads, 7, p.head_dim});
    out = Tensor::Contiguous(DType::kF32, {p.batch, p.q_heads, 3, p.head_dim});
    int i = 0;
    for (Tensor* t : {&q, &k, &v}) {
      float* f = t->view.As<float>();
      for (int64_t e = 0; e < t->view.NumElements(); ++e) {
        f[e] = std::sin(0.37f * static_cast<float>(++i));
      }
    }
    ResetOut();
  }
  void ResetOut() {
    float* o = out.view.As<float>();
    for (int64_t e = 0; e < out.view.NumElements(); ++e) o[e] = NAN;
  }
  AttentionArgs args() const {
    return {q.view, k.view, v.view, {}, out.view, {}, {}};
  }
  std::vector<float> Out() const {
    const float* o = out.view.As<float>();
    return {o, o + out.view.NumElements()};
  }
  Tensor q, k, v, out;
};

std::vector<float> InProcess(const AttentionProblem& p) {
  auto local = plugin::LoadPlugin(kPlugin);
  EXPECT_TRUE(local.ok()) << local.status().ToString();
  Data d(p);
  EXPECT_TRUE((*local)->Attention(p, d.args()).ok());
  return d.Out();
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(RemoteBackendTest, ComputesWhatTheInProcessPluginComputesInSharedMemory) {
  shared_memory::Scope share(true);
  auto r = RemoteBackend::Start({"", kPlugin});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->name(), "example_misbehave");
  const AttentionProblem p = Problem();
  Data d(p);
  // Shared segments: the worker writes out in place.
  ASSERT_TRUE(shared_memory::Find(d.out.view.data, 4).has_value());
  ASSERT_TRUE((*r)->Supports(p).ok());
  ASSERT_TRUE((*r)->Attention(p, d.args()).ok());
  EXPECT_TRUE(SameBits(d.Out(), InProcess(p)));
  EXPECT_EQ((*r)->LastFault(), Fault::kNone);
  EXPECT_EQ((*r)->deaths(), 0);
}

TEST(RemoteBackendTest, StagesViewsOutsideEverySegmentAndCopiesOutBack) {
  const AttentionProblem p = Problem();
  EXPECT_FALSE(shared_memory::Enabled());
  Data d(p);
  // Plain heap copies of every tensor: no segment holds them.
  std::vector<float> q(d.q.view.As<float>(),
                       d.q.view.As<float>() + d.q.view.NumElements());
  std::vector<float> k(d.k.view.As<float>(),
                       d.k.view.As<float>() + d.k.view.NumElements());
  std::vector<float> v(d.v.view.As<float>(),
                       d.v.view.As<float>() + d.v.view.NumElements());
  std::vector<float> out(d.out.view.NumElements(), NAN);
  AttentionArgs a = d.args();
  a.q.data = q.data();
  a.k.data = k.data();
  a.v.data = v.data();
  a.out.data = out.data();
  ASSERT_FALSE(shared_memory::Find(out.data(), 4).has_value());
  auto r = RemoteBackend::Start({"", kPlugin});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE((*r)->Attention(p, a).ok());
  EXPECT_TRUE(SameBits(out, InProcess(p)));
}

struct DeathCase {
  const char* spec;
  Fault fault;
  const char* says;  // in the status message
};

class RemoteDeathTest : public testing::TestWithParam<DeathCase> {};

TEST_P(RemoteDeathTest, DeathInAttentionIsAFaultAndTheNextCallRestarts) {
  shared_memory::Scope share(true);
  const DeathCase& c = GetParam();
  RemoteOptions o;
  o.call_timeout_s = 0.5;
  auto r = [&] {
    Misbehave m(c.spec);
    return RemoteBackend::Start({"", kPlugin}, o);
  }();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const AttentionProblem p = Problem();
  Data d(p);
  const auto t0 = std::chrono::steady_clock::now();
  const Status s = (*r)->Attention(p, d.args());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
                .count(),
            10.0);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_EQ((*r)->LastFault(), c.fault) << s.ToString();
  EXPECT_NE(s.message().find(c.says), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("in attention"), std::string::npos)
      << s.ToString();
  // Its last words (stderr) are quoted.
  EXPECT_NE(s.message().find("| example_misbehave: attention: "),
            std::string::npos)
      << s.ToString();
  EXPECT_EQ((*r)->deaths(), 1);
  EXPECT_EQ((*r)->worker_pid(), -1);
  // The environment no longer says misbehave: the restarted worker is a
  // correct kernel, and the fault is cleared.
  d.ResetOut();
  ASSERT_TRUE((*r)->Attention(p, d.args()).ok());
  EXPECT_EQ((*r)->LastFault(), Fault::kNone);
  EXPECT_TRUE(SameBits(d.Out(), InProcess(p)));
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, RemoteDeathTest,
    testing::Values(DeathCase{"segv@attention", Fault::kCrash, "SIGSEGV"},
                    DeathCase{"abort@attention", Fault::kCrash, "SIGABRT"},
                    DeathCase{"exit0@attention", Fault::kExit, "status 0"},
                    DeathCase{"exit3@attention", Fault::kExit, "status 3"},
                    DeathCase{"hang@attention", Fault::kTimeout,
                              "no answer within 0.5 s"}));

TEST(RemoteBackendTest, ACrashInSupportsIsAFaultNotADecline) {
  auto r = [&] {
    Misbehave m("segv@supports+1");
    return RemoteBackend::Start({"", kPlugin});
  }();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE((*r)->Supports(Problem()).ok());
  const Status s = (*r)->Supports(Problem());
  EXPECT_FALSE(s.ok());
  EXPECT_EQ((*r)->LastFault(), Fault::kCrash) << s.ToString();
}

TEST(RemoteBackendTest, AWorkerKilledFromOutsideIsACrash) {
  auto r = [&] {
    Misbehave m("print@supports");
    return RemoteBackend::Start({"", kPlugin});
  }();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // print@supports prints and answers; the worker is then killed from here.
  ASSERT_TRUE((*r)->Supports(Problem()).ok());
  const pid_t pid = (*r)->worker_pid();
  ASSERT_GT(pid, 0);
  kill(pid, SIGKILL);
  const Status s = (*r)->Supports(Problem());
  EXPECT_EQ((*r)->LastFault(), Fault::kCrash) << s.ToString();
  EXPECT_NE(s.message().find("SIGKILL"), std::string::npos) << s.ToString();
}

TEST(RemoteBackendTest, PrintingIsNoFailure) {
  auto r = [&] {
    Misbehave m("print@attention");
    return RemoteBackend::Start({"", kPlugin});
  }();
  ASSERT_TRUE(r.ok());
  const AttentionProblem p = Problem();
  Data d(p);
  ASSERT_TRUE((*r)->Attention(p, d.args()).ok());  // printing is no failure
  EXPECT_TRUE(SameBits(d.Out(), InProcess(p)));
}

TEST(RemoteBackendTest, StartNamesAPluginThatDoesNotLoadOrDiesLoading) {
  auto missing = RemoteBackend::Start({"", "/nonexistent/libnothing.so"});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound)
      << missing.status().ToString();
  EXPECT_NE(missing.status().message().find("/nonexistent/libnothing.so"),
            std::string::npos);
  auto dies = [&] {
    Misbehave m("abort@create");
    return RemoteBackend::Start({"", kPlugin});
  }();
  ASSERT_FALSE(dies.ok());
  EXPECT_NE(dies.status().message().find("plugin=" + kPlugin),
            std::string::npos)
      << dies.status().ToString();
  EXPECT_NE(dies.status().message().find("SIGABRT"), std::string::npos)
      << dies.status().ToString();
}

TEST(RemoteBackendTest, TheWorkersAppendBytesReachThisProcesssMeter) {
  shared_memory::Scope share(true);
  auto r = RemoteBackend::Start({"", kPlugin});
  ASSERT_TRUE(r.ok());
  const std::array<int64_t, 4> cache_shape{1, 2, 8, 16}, new_shape{1, 2, 2, 16};
  Tensor kc = Tensor::Contiguous(DType::kF32, cache_shape);
  Tensor vc = Tensor::Contiguous(DType::kF32, cache_shape);
  Tensor nk = Tensor::Contiguous(DType::kF32, new_shape);
  Tensor nv = Tensor::Contiguous(DType::kF32, new_shape);
  for (int64_t e = 0; e < nk.view.NumElements(); ++e) {
    nk.view.As<float>()[e] = static_cast<float>(e);
    nv.view.As<float>()[e] = -static_cast<float>(e);
  }
  const int64_t positions[] = {3}, new_lens[] = {2};
  const KvAppendArgs a{kc.view, vc.view, nk.view, nv.view,
                       positions, new_lens, {},      {}};
  accounting::Meter meter;
  ASSERT_TRUE((*r)->AppendKv(a).ok());
  EXPECT_EQ(meter.Read().bytes_copied, AppendedBytes(a));
  // Written in place: token 0 of head 1 landed at position 3.
  EXPECT_EQ(kc.view.Load(0, 1, 3, 5), nk.view.Load(0, 1, 0, 5));
  EXPECT_EQ(vc.view.Load(0, 1, 4, 7), nv.view.Load(0, 1, 1, 7));
  EXPECT_EQ(kc.view.Load(0, 1, 5, 0), 0.0f);
}

TEST(RemoteBackendTest, RegisteredBackendsRunInTheFullWorker) {
  shared_memory::Scope share(true);
  auto r = RemoteBackend::Start({"reference", ""});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->name(), "reference");
  const AttentionProblem p = Problem();
  Data d(p);
  ASSERT_TRUE((*r)->Attention(p, d.args()).ok());
  const std::vector<float> got = d.Out(), want = InProcess(p);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << i;  // rows past q_lens: untouched
    } else {
      EXPECT_NEAR(got[i], want[i], 1e-5) << i;
    }
  }
}

// The attention block through the worker: the same protocol as attention
// (shared segments, or staged views), bf16 weights, biases, Wo, GQA, a
// ragged causal batch with a context already in the cache.
AttentionBlockProblem BlockProblem() {
  AttentionBlockProblem p;
  p.attention = Problem();
  p.hidden = 24;
  p.weight_dtype = DType::kBF16;
  p.qkv_bias = true;
  p.output_projection = true;
  return p;
}

// Seeded block tensors (in shared memory when a Scope is active); out and
// the caches' new slots are what the block writes.
AttentionBlockData BlockData(const AttentionBlockProblem& p) {
  auto d = AttentionBlockData::Create(p);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  Rng rng(19, 0);
  d->Fill(p, rng);
  return std::move(d).value();
}

// Every byte the block may write: out, then the whole K and V caches.
std::vector<std::byte> Written(const AttentionBlockData& d) {
  std::vector<std::byte> all;
  for (const Tensor* t : {&d.out(), &d.k_cache(), &d.v_cache()}) {
    const auto* b = reinterpret_cast<const std::byte*>(t->buffer.data());
    all.insert(all.end(), b, b + t->buffer.size());
  }
  return all;
}

std::vector<std::byte> InProcessBlock(const AttentionBlockProblem& p) {
  auto local = plugin::LoadPlugin(kPlugin);
  EXPECT_TRUE(local.ok()) << local.status().ToString();
  AttentionBlockData d = BlockData(p);
  const Status s = (*local)->AttentionBlock(p, d.args());
  EXPECT_TRUE(s.ok()) << s.ToString();
  return Written(d);
}

TEST(RemoteBackendTest, TheBlockComputesWhatTheInProcessPluginComputes) {
  const AttentionBlockProblem p = BlockProblem();
  const std::vector<std::byte> want = InProcessBlock(p);
  // The block's tensors in shared segments (written in place), then on the
  // heap (staged through the scratch segment and copied back).
  for (const bool shared : {true, false}) {
    std::unique_ptr<RemoteBackend> r;
    std::optional<AttentionBlockData> d;
    {
      shared_memory::Scope share(shared);
      auto started = RemoteBackend::Start({"", kPlugin});
      ASSERT_TRUE(started.ok()) << started.status().ToString();
      r = std::move(*started);
      d.emplace(BlockData(p));
    }
    EXPECT_EQ(shared_memory::Find(d->out().view.data, 4).has_value(), shared);
    ASSERT_TRUE((*r).SupportsBlock(p).ok());
    const Status s = r->AttentionBlock(p, d->args());
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(Written(*d), want) << "shared=" << shared;
    EXPECT_EQ(r->LastFault(), Fault::kNone);
  }
}

TEST(RemoteBackendTest, TheBlockThroughTheWorkerMatchesTheOracle) {
  auto r = RemoteBackend::Start({"", kPlugin});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Backend* one[] = {r->get()};
  AttentionBlockProblem p = BlockProblem();
  harness::testing::ExpectBlockMatchesOracle(one, p, 1);
  p.attention.mask = MaskKind::kBias;
  p.attention.layout = KvLayout::kTransposedV;
  p.weight_dtype = DType::kF32;
  p.output_projection = false;
  harness::testing::ExpectBlockMatchesOracle(one, p, 2);
}

// A worker that dies in the block is the block's finding, named as such,
// and the next call starts a fresh worker -- as for attention.
TEST_P(RemoteDeathTest, DeathInTheBlockIsAFaultAndTheNextCallRestarts) {
  shared_memory::Scope share(true);
  DeathCase c = GetParam();
  std::string spec = c.spec;
  spec.replace(spec.find("@attention"), 10, "@attention_block");
  RemoteOptions o;
  o.call_timeout_s = 0.5;
  auto r = [&] {
    Misbehave m(spec.c_str());
    return RemoteBackend::Start({"", kPlugin}, o);
  }();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const AttentionBlockProblem p = BlockProblem();
  AttentionBlockData d = BlockData(p);
  // The attention alone does not misbehave: only the block's entry does.
  Data attention(Problem());
  ASSERT_TRUE((*r)->Attention(Problem(), attention.args()).ok());
  ASSERT_TRUE((*r)->SupportsBlock(p).ok());
  const Status s = (*r)->AttentionBlock(p, d.args());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_EQ((*r)->LastFault(), c.fault) << s.ToString();
  EXPECT_NE(s.message().find(c.says), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("in attention_block"), std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("| example_misbehave: attention_block: "),
            std::string::npos)
      << s.ToString();
  EXPECT_EQ((*r)->deaths(), 1);
  EXPECT_EQ((*r)->worker_pid(), -1);
  AttentionBlockData again = BlockData(p);
  ASSERT_TRUE((*r)->AttentionBlock(p, again.args()).ok());
  EXPECT_EQ((*r)->LastFault(), Fault::kNone);
  EXPECT_EQ(Written(again), InProcessBlock(p));
}

TEST(RemoteBackendTest, ACrashInSupportsBlockIsAFaultNotADecline) {
  auto r = [&] {
    Misbehave m("segv@supports_block+1");
    return RemoteBackend::Start({"", kPlugin});
  }();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE((*r)->SupportsBlock(BlockProblem()).ok());
  const Status s = (*r)->SupportsBlock(BlockProblem());
  EXPECT_FALSE(s.ok());
  EXPECT_EQ((*r)->LastFault(), Fault::kCrash) << s.ToString();
  EXPECT_NE(s.message().find("SIGSEGV) in supports_block"), std::string::npos)
      << s.ToString();
}

// The worker answers with the plug-in adapter's own errors: bad arguments
// named before the plug-in runs.
TEST(RemoteBackendTest, BadBlockArgumentsAreNamedAcrossTheWorker) {
  shared_memory::Scope share(true);
  auto r = RemoteBackend::Start({"", kPlugin});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const AttentionBlockProblem p = BlockProblem();
  AttentionBlockData d = BlockData(p);
  AttentionBlockArgs a = d.args();
  a.wk = a.wv;
  a.wk.shape[3] += 1;
  const Status s = (*r)->AttentionBlock(p, a);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("wk"), std::string::npos) << s.ToString();
  EXPECT_EQ((*r)->LastFault(), Fault::kNone);
}

}  // namespace
}  // namespace attnkit::backends
