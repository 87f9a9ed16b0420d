#include "harness/runner.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>

#include "decode/step.h"
#include "reference/attention_block.h"
#include "reference/concat_kv.h"
#include "reference/oracle.h"
#include "reference/reference.h"
#include "runtime/kv_cache.h"
#include "runtime/random.h"
#include "runtime/shared_memory.h"

namespace attnkit::harness {
namespace {

using reference::ErrorRatio;
using reference::MeasureError;
using reference::WithinTolerance;
using Clock = std::chrono::steady_clock;

// Output elements a backend must not touch (rows i >= q_lens[b]) and must
// overwrite (rows i < q_lens[b], including fully masked ones, which are 0)
// start as this quiet NaN. Its payload is unlikely to be produced by any
// arithmetic, so "still the sentinel" means "never written".
constexpr uint32_t kSentinelBits = 0x7fc0dea1u;

// The whole output allocation -- the view and the padding around and
// between its rows (RowLayout) -- starts as the sentinel.
void FillSentinel(const Tensor& out) {
  auto* words = static_cast<uint32_t*>(out.buffer.data());
  std::fill(words, words + out.buffer.size() / sizeof(uint32_t), kSentinelBits);
}

std::string Coordinates(int64_t b, int64_t h, int64_t i, int64_t e) {
  return "[" + std::to_string(b) + "," + std::to_string(h) + "," +
         std::to_string(i) + "," + std::to_string(e) + "]";
}

// Where element `offset` (in elements from the buffer's start) of a tensor
// lies: "[b,h,i,e]" of its view, or "padding at element N" when no view
// element is there. A linear search: only on a failure.
std::string Locate(const Tensor& t, int64_t offset) {
  const TensorView& v = t.view;
  const int64_t esize = DTypeSize(v.dtype);
  const int64_t lead = (static_cast<const std::byte*>(v.data) -
                        static_cast<const std::byte*>(t.buffer.data())) /
                       esize;
  if (v.NumElements() > 0) {
    for (int64_t b = 0; b < v.shape[0]; ++b)
      for (int64_t h = 0; h < v.shape[1]; ++h)
        for (int64_t i = 0; i < v.shape[2]; ++i)
          for (int64_t e = 0; e < v.shape[3]; ++e) {
            if (lead + v.Offset(b, h, i, e) == offset) {
              return Coordinates(b, h, i, e);
            }
          }
  }
  return " padding at element " + std::to_string(offset) + " of " +
         std::to_string(t.buffer.size() / static_cast<size_t>(esize)) +
         " (outside the view " + v.DebugString() + ")";
}

// The first element of rows i >= q_lens[b], or of the padding, that no
// longer holds the sentinel, as a message ("" when none).
std::string StrayWrite(const AttentionProblem& p, const Tensor& out_tensor) {
  const TensorView& out = out_tensor.view;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.q_heads; ++h)
      for (int64_t i = p.q_lens[b]; i < out.shape[2]; ++i)
        for (int64_t e = 0; e < p.head_dim; ++e) {
          const float x = out.Load(b, h, i, e);
          if (std::bit_cast<uint32_t>(x) != kSentinelBits) {
            return "wrote out" + Coordinates(b, h, i, e) + " = " +
                   std::to_string(x) + ", past q_lens[" + std::to_string(b) +
                   "]=" + std::to_string(p.q_lens[b]);
          }
        }
  const size_t words = out_tensor.buffer.size() / sizeof(uint32_t);
  if (static_cast<int64_t>(words) == out.NumElements()) return "";  // dense
  // Padded: every word that is no element of the view must be the sentinel.
  std::vector<uint8_t> in_view(words, 0);
  const int64_t lead = static_cast<const float*>(out.data) -
                       static_cast<const float*>(out_tensor.buffer.data());
  if (out.NumElements() > 0) {
    for (int64_t b = 0; b < out.shape[0]; ++b)
      for (int64_t h = 0; h < out.shape[1]; ++h)
        for (int64_t i = 0; i < out.shape[2]; ++i)
          for (int64_t e = 0; e < out.shape[3]; ++e) {
            in_view[static_cast<size_t>(lead + out.Offset(b, h, i, e))] = 1;
          }
  }
  const auto* w = static_cast<const uint32_t*>(out_tensor.buffer.data());
  for (size_t n = 0; n < words; ++n) {
    if (!in_view[n] && w[n] != kSentinelBits) {
      return "wrote out's" + Locate(out_tensor, static_cast<int64_t>(n)) +
             " = " + std::to_string(std::bit_cast<float>(w[n]));
    }
  }
  return "";
}

// The bytes of a call's inputs as drawn. After every backend call they are
// compared -- the view and its padding: a backend may only read them -- and
// restored, so the next backend sees the inputs it would have.
class InputGuard {
 public:
  void Watch(std::string name, const Tensor& t) {
    if (t.buffer.size() == 0) return;
    const auto* p = static_cast<const std::byte*>(t.buffer.data());
    entries_.push_back({std::move(name), &t, {p, p + t.buffer.size()}});
  }
  // "" when every input is intact; else the first changed element, named.
  std::string CheckAndRestore() {
    std::string found;
    for (Entry& x : entries_) {
      auto* now = static_cast<std::byte*>(x.tensor->buffer.data());
      if (std::memcmp(now, x.bytes.data(), x.bytes.size()) == 0) continue;
      if (found.empty()) {
        const size_t esize =
            static_cast<size_t>(DTypeSize(x.tensor->view.dtype));
        size_t at = 0;
        while (now[at] == x.bytes[at]) ++at;
        const size_t elem = at / esize;
        const auto value = [&](const std::byte* base) {
          const std::byte* e = base + elem * esize;
          if (esize == 1) {
            return std::to_string(
                static_cast<int>(std::to_integer<int8_t>(*e)));
          }
          return std::to_string(esize == 4 ? std::bit_cast<float>(Word(e))
                                           : Bf16At(e));
        };
        found = "wrote " + x.name +
                Locate(*x.tensor, static_cast<int64_t>(elem)) + " = " +
                value(now) + ", was " + value(x.bytes.data()) +
                " (an input: read-only)";
      }
      std::memcpy(now, x.bytes.data(), x.bytes.size());
    }
    return found;
  }

 private:
  static uint32_t Word(const std::byte* p) {
    uint32_t w;
    std::memcpy(&w, p, sizeof(w));
    return w;
  }
  static float Bf16At(const std::byte* p) {
    bf16 x;
    std::memcpy(&x, p, sizeof(x));
    return x.ToFloat();
  }
  struct Entry {
    std::string name;
    const Tensor* tensor;
    std::vector<std::byte> bytes;
  };
  std::vector<Entry> entries_;
};

// Every byte of a decode loop's caches starts as kCacheFill, and the rows of
// the new-token staging buffers past a sequence's new_len (a ragged batch's
// padding, never to be read) as kStagingFill. Both are finite, nonzero and
// different in f32 (-2.9e-16, 1.5e16) and bf16, so an append that writes
// anything outside the new tokens -- zeros ("clearing" the next slot), or a
// staging row past new_len (a `t <= n` loop) -- changes a byte the cache
// check compares; zero fills would let both through unseen. A kernel that
// reads past the length and masks by multiplying with 0 stays correct.
constexpr unsigned char kCacheFill = 0xa5;
constexpr unsigned char kStagingFill = 0x5a;

void FillBytes(const Tensor& t, unsigned char byte) {
  if (t.buffer.size() > 0) std::memset(t.buffer.data(), byte, t.buffer.size());
}

// Copies rows [src_row, src_row + n) of sequence b (all heads, all of dim 3)
// to rows [dst_row, ...) of dst. Load/Store round-trips f32 and bf16 values
// bit for bit (no NaNs in generated inputs).
void CopyRows(const TensorView& src, int64_t src_row, const TensorView& dst,
              int64_t dst_row, int64_t b, int64_t n) {
  for (int64_t h = 0; h < dst.shape[1]; ++h)
    for (int64_t t = 0; t < n; ++t)
      for (int64_t e = 0; e < dst.shape[3]; ++e) {
        dst.Store(b, h, dst_row + t, e, src.Load(b, h, src_row + t, e));
      }
}

// Judges a backend's output `out` of problem p against the truth; returns
// false when it failed (and fills r).
bool Judge(const AttentionProblem& p, const TensorView& out,
           const reference::Truth& truth, int64_t step, CheckResult& r) {
  auto fail = [&](Outcome o, std::string msg) {
    r.outcome = o;
    r.message = std::move(msg);
    r.step = step;
    r.problem = p;
    r.bounds = truth.bounds;
    return false;
  };
  const ErrorStats e = MeasureError(p, truth.oracle, out, truth.bounds.max_abs);
  const double ratio = ErrorRatio(e, truth.bounds);
  if (ratio >= r.ratio) {
    r.ratio = ratio;
    r.error = e;
    r.bounds = truth.bounds;
    r.problem = p;
  }
  if (e.nonfinite > 0) {
    r.error = e;
    return fail(Outcome::kNonFinite, "");
  }
  if (!WithinTolerance(e, truth.bounds)) {
    r.error = e;
    return fail(Outcome::kMismatch, "");
  }
  return true;
}

// After a call that returned OK: its inputs untouched, no write outside its
// output rows, then its output judged. Returns false when it failed.
bool CheckCall(const AttentionProblem& p, const Tensor& out,
               const reference::Truth& truth, int64_t step, InputGuard& inputs,
               CheckResult& r) {
  auto fail = [&](Outcome o, std::string msg) {
    r.outcome = o;
    r.message = std::move(msg);
    r.step = step;
    r.problem = p;
    r.bounds = truth.bounds;
    return false;
  };
  if (std::string wrote = inputs.CheckAndRestore(); !wrote.empty()) {
    return fail(Outcome::kInputWrite, std::move(wrote));
  }
  if (!Judge(p, out.view, truth, step, r)) return false;
  if (std::string stray = StrayWrite(p, out); !stray.empty()) {
    return fail(Outcome::kStrayWrite, std::move(stray));
  }
  return true;
}

// Runs `call` (a backend call returning its Status) on an output that starts
// as the sentinel, timed into r.seconds; a throw is an error. Returns its
// Status.
template <typename Call>
Status TimedCall(const Tensor& out, CheckResult& r, Call&& call) {
  FillSentinel(out);
  const auto t0 = Clock::now();
  Status s;
  try {
    s = call();
  } catch (const std::exception& e) {
    s = Status::Internal(std::string("threw: ") + e.what());
  }
  r.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  return s;
}

Status Supported(Backend& b, const AttentionProblem& p) {
  try {
    return b.Supports(p);
  } catch (const std::exception& e) {
    return Status::Internal(std::string("Supports threw: ") + e.what());
  }
}

// The outcome of a call that returned an error: the backend answering
// (kError), or its worker process dying in the call.
Outcome ErrorOutcome(const Backend& b) {
  switch (b.LastFault()) {
    case Fault::kCrash:
      return Outcome::kCrash;
    case Fault::kExit:
      return Outcome::kExit;
    case Fault::kTimeout:
      return Outcome::kTimeout;
    case Fault::kNone:
      break;
  }
  return Outcome::kError;
}

// Supports() said no: a skip -- unless the worker died asking, which is a
// finding like any other death (a crash is never "not supported").
void Declined(const Backend& b, const Status& s, CheckResult& r) {
  r.outcome =
      b.LastFault() == Fault::kNone ? Outcome::kSkipped : ErrorOutcome(b);
  r.message = s.ToString();
}

bool AnyInWorker(std::span<Backend* const> backends) {
  return std::any_of(backends.begin(), backends.end(),
                     [](const Backend* b) { return b->InWorkerProcess(); });
}

StatusOr<std::vector<CheckResult>> RunPlain(
    const Case& c, std::span<Backend* const> backends) {
  const AttentionProblem& p = c.problem;
  auto created = [&] {
    shared_memory::Scope share(AnyInWorker(backends));
    return AttentionData::Create(p, p.max_kv_len() + c.kv_pad, c.io);
  }();
  ATTNKIT_ASSIGN_OR_RETURN(AttentionData data, std::move(created));
  Rng rng = ValueRng(c);
  data.Fill(p, rng, c.profile, c.origins);
  ATTNKIT_ASSIGN_OR_RETURN(reference::Truth truth,
                           reference::ComputeTruth(p, data.args()));
  InputGuard inputs;
  inputs.Watch("q", data.q());
  inputs.Watch("k", data.k());
  inputs.Watch("v", data.v());
  inputs.Watch("bias", data.bias());
  inputs.Watch("k_scale", data.k_scale());
  inputs.Watch("v_scale", data.v_scale());
  std::vector<CheckResult> results;
  for (Backend* backend : backends) {
    CheckResult r;
    r.backend = std::string(backend->name());
    r.problem = p;
    if (Status s = Supported(*backend, p); !s.ok()) {
      Declined(*backend, s, r);
      if (r.failed()) r.bounds = truth.bounds;
    } else {
      const Status called = TimedCall(
          data.out(), r, [&] { return backend->Attention(p, data.args()); });
      if (!called.ok()) {
        r.outcome = ErrorOutcome(*backend);
        r.message = called.ToString();
        r.bounds = truth.bounds;
        inputs.CheckAndRestore();  // for the next backend
      } else {
        CheckCall(p, data.out(), truth, -1, inputs, r);
      }
    }
    results.push_back(std::move(r));
  }
  return results;
}

// The first cache element that differs from the naive concatenation, or a
// byte written past the sequence's length (the cache starts as kCacheFill),
// as a message ("" when the cache is exact). This is the whole
// capacity-sized cache: an append may change only the new tokens' bytes.
// Which of a cache's tensors CompareCache compares.
enum class CacheTensor { kK, kV, kKScale, kVScale };

std::string CompareCache(const char* which, const TensorView& cache,
                         const reference::ConcatKv& golden,
                         CacheTensor tensor) {
  const int64_t esize = DTypeSize(cache.dtype);
  const auto* base = static_cast<const unsigned char*>(cache.data);
  for (int64_t b = 0; b < cache.shape[0]; ++b) {
    const TensorView want = tensor == CacheTensor::kK        ? golden.K(b)
                            : tensor == CacheTensor::kV      ? golden.V(b)
                            : tensor == CacheTensor::kKScale ? golden.KScale(b)
                                                             : golden.VScale(b);
    const auto* wbase = static_cast<const unsigned char*>(want.data);
    const int64_t len = golden.length(b);
    for (int64_t h = 0; h < cache.shape[1]; ++h)
      for (int64_t j = 0; j < cache.shape[2]; ++j)
        for (int64_t e = 0; e < cache.shape[3]; ++e) {
          const unsigned char* got = base + cache.Offset(b, h, j, e) * esize;
          static constexpr unsigned char kFill[4] = {kCacheFill, kCacheFill,
                                                     kCacheFill, kCacheFill};
          const unsigned char* expect =
              j < len ? wbase + want.Offset(0, h, j, e) * esize : kFill;
          if (std::memcmp(got, expect, static_cast<size_t>(esize)) != 0) {
            const std::string at = std::string(which) + "[" +
                                   std::to_string(b) + "," + std::to_string(h) +
                                   "," + std::to_string(j) + "," +
                                   std::to_string(e) + "]";
            if (j >= len) {
              return "wrote " + at + " = " +
                     std::to_string(cache.Load(b, h, j, e)) +
                     " past the sequence's length " + std::to_string(len);
            }
            const std::string expected =
                "expected " + std::to_string(want.Load(0, h, j, e));
            if (std::memcmp(got, kFill, static_cast<size_t>(esize)) == 0) {
              return at + " was never written (still the fill), " + expected;
            }
            return at + " = " + std::to_string(cache.Load(b, h, j, e)) + ", " +
                   expected + " (bit-exact)";
          }
        }
  }
  return "";
}

// Every backend runs the decode loop through decode::Stepper -- the step the
// decode session and the decode_step benchmark run -- on its own KvCache, and
// each step is checked three ways: the whole capacity-sized cache against
// the naive concatenation (an append may change only the new tokens' bytes),
// the output against the oracle, and no stray output rows.
StatusOr<std::vector<CheckResult>> RunDecode(
    const Case& c, std::span<Backend* const> backends) {
  const AttentionProblem& p = c.problem;
  const int64_t steps = c.decode_steps, capacity = DecodeCapacity(c);
  // Every query and key of the whole loop, drawn once so the value profile
  // holds across steps (one dominant key, constant rows, ...).
  AttentionProblem total = p;
  total.kv_dtype.reset();  // the tokens, in q's dtype (see `stored` below)
  std::vector<int64_t> prompt(p.batch), q0(p.batch);
  for (int64_t b = 0; b < p.batch; ++b) {
    prompt[b] = p.kv_lens[b] - steps * p.q_lens[b];
    q0[b] = std::min(p.q_lens[b], prompt[b]);
    total.q_lens[b] = q0[b] + steps * p.q_lens[b];
  }
  ATTNKIT_ASSIGN_OR_RETURN(AttentionData all,
                           AttentionData::Create(total, capacity, c.io));
  Rng rng = ValueRng(c);
  all.Fill(total, rng, c.profile, c.origins);
  const AttentionArgs& whole = all.args();
  // An i8 cache is fed f32/bf16 tokens (drawn in q's dtype above), which
  // its append quantizes: the truth reads them as every cache stores them,
  // each row quantized by the one rule (QuantizeRows), as the golden does.
  AttentionArgs stored = whole;
  Tensor stored_k, stored_v, k_scale, v_scale;
  if (p.quantized_kv()) {
    const TensorView& wk = whole.k;
    const std::array<int64_t, 4> sshape{wk.shape[0], wk.shape[1], wk.shape[2],
                                        1};
    stored_k = Tensor::Allocate(DType::kI8, wk.shape, wk.strides);
    stored_v = Tensor::Allocate(DType::kI8, whole.v.shape, whole.v.strides);
    k_scale = Tensor::Allocate(DType::kF32, sshape, KvScaleStrides(sshape));
    v_scale = Tensor::Allocate(DType::kF32, sshape, KvScaleStrides(sshape));
    QuantizeRows(whole.k, stored_k.view, k_scale.view);
    QuantizeRows(whole.v, stored_v.view, v_scale.view);
    stored.k = stored_k.view;
    stored.v = stored_v.view;
    stored.k_scale = k_scale.view;
    stored.v_scale = v_scale.view;
  }

  std::vector<CheckResult> results(backends.size());
  KvCacheConfig kc;
  kc.batch = p.batch;
  kc.kv_heads = p.kv_heads;
  kc.head_dim = p.head_dim;
  // A KvCache holds at least one token; an all-empty loop (q = kv = 0)
  // still gets its cache compared, one never-written slot.
  kc.capacity = std::max<int64_t>(capacity, 1);
  kc.dtype = p.KvDType();
  kc.layout = p.layout;
  std::vector<KvCache> caches;
  std::vector<decode::Stepper> steppers;
  caches.reserve(backends.size());  // the steppers point into it
  for (size_t i = 0; i < backends.size(); ++i) {
    CheckResult& r = results[i];
    r.backend = std::string(backends[i]->name());
    r.problem = p;
    for (int64_t s = 0; s <= steps; ++s) {
      if (Status st = Supported(*backends[i], DecodeStepProblem(c, s));
          !st.ok()) {
        Declined(*backends[i], st, r);
        if (r.failed()) r.step = s;
        break;
      }
    }
    auto created = [&] {
      shared_memory::Scope share(backends[i]->InWorkerProcess());
      return KvCache::Create(kc);
    }();
    ATTNKIT_ASSIGN_OR_RETURN(KvCache cache, std::move(created));
    cache.Clear(std::byte{kCacheFill});
    caches.push_back(std::move(cache));
    steppers.push_back(decode::Stepper::InPlace(*backends[i], caches.back()));
  }
  reference::ConcatKv golden(p.batch, p.kv_heads, p.head_dim, p.KvDType());
  const bool share_steps = AnyInWorker(backends);

  for (int64_t s = 0; s <= steps; ++s) {
    const AttentionProblem ps = DecodeStepProblem(c, s);
    std::vector<int64_t> positions(p.batch), new_lens(p.batch);
    for (int64_t b = 0; b < p.batch; ++b) {
      positions[b] = s == 0 ? 0 : prompt[b] + (s - 1) * p.q_lens[b];
      new_lens[b] = s == 0 ? prompt[b] : p.q_lens[b];
    }
    const int64_t max_new = *std::max_element(new_lens.begin(), new_lens.end());
    const std::array<int64_t, 4> new_shape{p.batch, p.kv_heads, max_new,
                                           p.head_dim};
    // New tokens in the problem's layout too: a token-major (BSHD) staging
    // buffer is what a projection emits.
    std::optional<shared_memory::Scope> share;
    share.emplace(share_steps);
    Tensor new_k = Tensor::Allocate(p.dtype, new_shape,
                                    KvStrides(p.layout, false, new_shape));
    Tensor new_v = Tensor::Allocate(p.dtype, new_shape,
                                    KvStrides(p.layout, true, new_shape));
    FillBytes(new_k, kStagingFill);
    FillBytes(new_v, kStagingFill);
    const int64_t mq = ps.max_q_len();
    const std::array<int64_t, 4> q_shape{p.batch, p.q_heads, mq, p.head_dim};
    Tensor q = AllocateRows(p.dtype, q_shape, c.io.q);
    Tensor out = AllocateRows(DType::kF32, q_shape, c.io.out);
    Tensor bias;
    if (p.mask == MaskKind::kBias) {
      bias = Tensor::Contiguous(
          DType::kF32,
          {p.batch, c.io.shared_bias ? 1 : p.q_heads, mq, capacity});
    }
    share.reset();
    for (int64_t b = 0; b < p.batch; ++b) {
      CopyRows(whole.k, positions[b], new_k.view, 0, b, new_lens[b]);
      CopyRows(whole.v, positions[b], new_v.view, 0, b, new_lens[b]);
      const int64_t qrow = s == 0 ? 0 : q0[b] + (s - 1) * p.q_lens[b];
      CopyRows(whole.q, qrow, q.view, 0, b, ps.q_lens[b]);
      if (p.mask == MaskKind::kBias) {
        CopyRows(whole.bias, qrow, bias.view, 0, b, ps.q_lens[b]);
      }
    }
    ATTNKIT_RETURN_IF_ERROR(
        golden.Append(new_k.view, new_v.view, new_lens).status());
    // The oracle and the naive reference read the keys where they were
    // drawn; each backend reads its own cache, whose bytes are checked equal.
    const AttentionArgs truth_args{q.view,        stored.k, stored.v,
                                   bias.view,     out.view, stored.k_scale,
                                   stored.v_scale};
    ATTNKIT_ASSIGN_OR_RETURN(reference::Truth truth,
                             reference::ComputeTruth(ps, truth_args));

    const decode::LayerStep layer{q.view, new_k.view, new_v.view, bias.view,
                                  out.view};
    InputGuard inputs;
    inputs.Watch("q", q);
    inputs.Watch("new_k", new_k);
    inputs.Watch("new_v", new_v);
    inputs.Watch("bias", bias);
    for (size_t i = 0; i < backends.size(); ++i) {
      CheckResult& r = results[i];
      if (r.outcome != Outcome::kPass) continue;  // skipped or failed earlier
      auto fail = [&](Outcome o, const std::string& msg) {
        r.outcome = o;
        r.message = "step " + std::to_string(s) + ": " + msg;
        r.step = s;
        r.problem = ps;
        r.bounds = truth.bounds;
      };
      AttentionProblem call = ps;  // the stepper sets kv_lens and layout
      const Status st = TimedCall(out, r, [&] {
        return steppers[i].Step(call, {&layer, 1}, new_lens, nullptr);
      });
      const std::string wrote = inputs.CheckAndRestore();
      if (!st.ok()) {
        fail(ErrorOutcome(*backends[i]), st.ToString());
        continue;
      }
      if (!wrote.empty()) {
        fail(Outcome::kInputWrite, wrote);
        continue;
      }
      const KvCache::View full = caches[i].Full(0);
      std::string diff =
          CompareCache("k_cache", full.k, golden, CacheTensor::kK);
      if (diff.empty()) {
        diff = CompareCache("v_cache", full.v, golden, CacheTensor::kV);
      }
      if (diff.empty() && p.quantized_kv()) {
        diff =
            CompareCache("k_scale", full.k_scale, golden, CacheTensor::kKScale);
        if (diff.empty()) {
          diff = CompareCache("v_scale", full.v_scale, golden,
                              CacheTensor::kVScale);
        }
      }
      if (!diff.empty()) {
        fail(Outcome::kKvCache, diff);
        continue;
      }
      if (!CheckCall(ps, out, truth, s, inputs, r) && !r.message.empty()) {
        r.message = "step " + std::to_string(s) + ": " + r.message;
      }
    }
  }
  return results;
}

// A block's cache after a backend's call: every element outside the new
// tokens' slots [kv_len - q_len, kv_len) bit for bit what it was, and every
// new K/V element within its bound of the oracle's projection. "" when so.
std::string CheckBlockCache(const AttentionBlockProblem& p, const char* which,
                            const Tensor& cache,
                            const std::vector<std::byte>& before,
                            const std::vector<double>& want,
                            const std::vector<double>& bound) {
  const TensorView& v = cache.view;
  const AttentionProblem& at = p.attention;
  const int64_t mq = at.max_q_len(), d = at.head_dim;
  const auto* now = static_cast<const float*>(v.data);
  const auto* was = reinterpret_cast<const float*>(
      before.data() + (static_cast<const std::byte*>(v.data) -
                       static_cast<const std::byte*>(cache.buffer.data())));
  for (int64_t b = 0; b < v.shape[0]; ++b) {
    const int64_t p0 = at.kv_lens[b] - at.q_lens[b];
    for (int64_t h = 0; h < v.shape[1]; ++h)
      for (int64_t s = 0; s < v.shape[2]; ++s)
        for (int64_t e = 0; e < v.shape[3]; ++e) {
          const int64_t off = v.Offset(b, h, s, e);
          const float g = now[off];
          if (s < p0 || s >= at.kv_lens[b]) {
            if (std::bit_cast<uint32_t>(g) == std::bit_cast<uint32_t>(was[off]))
              continue;
            return "wrote " + std::string(which) + Coordinates(b, h, s, e) +
                   " = " + std::to_string(g) +
                   ", outside the new tokens' slots [" + std::to_string(p0) +
                   ", " + std::to_string(at.kv_lens[b]) + ")";
          }
          const size_t i =
              static_cast<size_t>((b * mq + s - p0) * p.kv_width() + h * d + e);
          if (std::fabs(static_cast<double>(g) - want[i]) <= bound[i]) continue;
          return std::string(which) + Coordinates(b, h, s, e) + " = " +
                 std::to_string(g) + ", the new token's projection is " +
                 std::to_string(want[i]) + " (allowed +-" +
                 std::to_string(bound[i]) + ")";
        }
  }
  return "";
}

std::vector<std::byte> Snapshot(const Tensor& t) {
  const auto* p = static_cast<const std::byte*>(t.buffer.data());
  return {p, p + t.buffer.size()};
}
void Restore(const Tensor& t, const std::vector<std::byte>& bytes) {
  // An empty tensor's buffer is null: memcpy must not see it, even for 0.
  if (bytes.empty()) return;
  std::memcpy(t.buffer.data(), bytes.data(), bytes.size());
}

// An attention-block case: the oracle and the naive block give the truth,
// then each backend's block runs on the same inputs and cache: its inputs
// untouched, the cache changed only in the new tokens' slots (within the
// projection bound there), out within the block's tolerance and nothing
// written past q_len.
// The block of step `step` (1-based) of a block case: the case's own
// problem when it is one call, else decode step `step` of its loop (q_lens
// new tokens on a context grown by the steps before).
AttentionBlockProblem BlockStep(const Case& c, int64_t step) {
  AttentionBlockProblem bp = c.Block();
  if (c.decode_steps > 0) bp.attention = DecodeStepProblem(c, step);
  return bp;
}

// The new tokens of step `step` >= 2 of a block decode loop: the same for
// every backend (step 1's are AttentionBlockData::Fill's).
void FillStepTokens(const Case& c, const AttentionBlockArgs& a, int64_t step) {
  Rng rng(c.seed ^ 0x78746f6b656e0000ull, c.index * 1024 + step);  // "xtoken"
  FillNormal(a.x, rng);
}

// One call of `backend` on the block of `bp`, the caches as the steps
// before left them: output, the new cache slots and every other cache byte
// against the f64 oracle of this state, inputs untouched. False (and `r`
// says why) on a failure.
bool RunBlockCall(Backend& backend, const AttentionBlockProblem& bp,
                  const AttentionBlockData& data,
                  const reference::BlockTruth& truth, CheckResult& r) {
  const std::vector<std::byte> k0 = Snapshot(data.k_cache()),
                               v0 = Snapshot(data.v_cache());
  const AttentionProblem shape = reference::BlockOutputShape(bp);
  InputGuard inputs;
  for (const auto& [name, tensor] : data.inputs()) inputs.Watch(name, *tensor);
  r.bounds = truth.out;
  const Status called = TimedCall(
      data.out(), r, [&] { return backend.AttentionBlock(bp, data.args()); });
  auto fail = [&](Outcome o, std::string msg) {
    r.outcome = o;
    r.message = std::move(msg);
    return false;
  };
  if (!called.ok()) {
    inputs.CheckAndRestore();
    return fail(ErrorOutcome(backend), called.ToString());
  }
  if (std::string wrote = inputs.CheckAndRestore(); !wrote.empty())
    return fail(Outcome::kInputWrite, std::move(wrote));
  if (std::string k = CheckBlockCache(bp, "k_cache", data.k_cache(), k0,
                                      truth.oracle.k, truth.k_bound);
      !k.empty())
    return fail(Outcome::kKvCache, std::move(k));
  if (std::string v = CheckBlockCache(bp, "v_cache", data.v_cache(), v0,
                                      truth.oracle.v, truth.v_bound);
      !v.empty())
    return fail(Outcome::kKvCache, std::move(v));
  const reference::Truth out_truth{truth.oracle.out, truth.out};
  if (!Judge(shape, data.out().view, out_truth, -1, r)) return false;
  if (std::string stray = StrayWrite(shape, data.out()); !stray.empty())
    return fail(Outcome::kStrayWrite, std::move(stray));
  return true;
}

// A block case: one call, or a decode loop of `steps` calls, each on the
// cache the backend's own previous steps wrote (so each step's oracle is
// computed on that state: a step is judged on its own arithmetic, not on
// the rounding its predecessors left in the cache).
StatusOr<std::vector<CheckResult>> RunBlock(
    const Case& c, std::span<Backend* const> backends) {
  const int64_t steps = std::max<int64_t>(c.decode_steps, 1);
  const AttentionBlockProblem first = BlockStep(c, 1);
  auto created = [&] {
    shared_memory::Scope share(AnyInWorker(backends));
    return AttentionBlockData::Create(c.Block());
  }();
  ATTNKIT_ASSIGN_OR_RETURN(AttentionBlockData data, std::move(created));
  Rng rng = ValueRng(c);
  data.Fill(first, rng);
  const std::vector<std::byte> k0 = Snapshot(data.k_cache()),
                               v0 = Snapshot(data.v_cache());
  const std::vector<std::byte> x0 = Snapshot(data.x());
  // Step 1 starts from the same state for every backend: one oracle.
  ATTNKIT_ASSIGN_OR_RETURN(const reference::BlockTruth truth1,
                           reference::ComputeBlockTruth(first, data.args()));
  std::vector<CheckResult> results;
  for (Backend* backend : backends) {
    CheckResult r;
    r.backend = std::string(backend->name());
    Restore(data.k_cache(), k0);
    Restore(data.v_cache(), v0);
    Restore(data.x(), x0);
    Status supported;
    try {
      supported = backend->SupportsBlock(first);
    } catch (const std::exception& e) {
      supported =
          Status::Internal(std::string("SupportsBlock threw: ") + e.what());
    }
    if (!supported.ok()) {
      r.problem = c.problem;
      r.bounds = truth1.out;
      Declined(*backend, supported, r);
      results.push_back(std::move(r));
      continue;
    }
    double worst = 0;  // err/bound over the steps
    for (int64_t step = 1; step <= steps; ++step) {
      const AttentionBlockProblem bp = BlockStep(c, step);
      bool ok;
      if (step == 1) {
        ok = RunBlockCall(*backend, bp, data, truth1, r);
      } else {
        FillStepTokens(c, data.args(), step);
        ATTNKIT_ASSIGN_OR_RETURN(const reference::BlockTruth truth,
                                 reference::ComputeBlockTruth(bp, data.args()));
        ok = RunBlockCall(*backend, bp, data, truth, r);
      }
      worst = std::max(worst, r.ratio);
      if (!ok) {
        if (c.decode_steps > 0)
          r.message = "decode step " + std::to_string(step) + " of " +
                      std::to_string(steps) + ": " + r.message;
        break;
      }
    }
    if (r.outcome == Outcome::kPass) r.ratio = worst;
    // Judge reports the output's shape; the case's problem is the attention.
    r.problem = c.problem;
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace

Rng ValueRng(const Case& c) {
  return Rng(c.seed ^ 0x76616c7565730000ull, c.index);  // "values"
}

StatusOr<std::vector<CheckResult>> RunCase(const Case& c,
                                           std::span<Backend* const> backends) {
  ATTNKIT_RETURN_IF_ERROR(ValidateCase(c));
  if (c.is_block()) return RunBlock(c, backends);
  if (c.decode_steps > 0) return RunDecode(c, backends);
  return RunPlain(c, backends);
}

}  // namespace attnkit::harness
