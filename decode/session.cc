#include "decode/session.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "backends/registry.h"
#include "reference/concat_kv.h"
#include "runtime/limits.h"
#include "runtime/random.h"
#include "runtime/shared_memory.h"

namespace attnkit::decode {
namespace {

// Every cache byte before its first append (decode report audit, NaN for
// a kernel that reads past a length).
constexpr unsigned char kPoison = 0xFF;

// The bits of every element of a dense view summed as unsigned integers: a
// layout-independent fingerprint (the same elements in any order give the
// same sum), read at memory speed.
uint64_t BitSum(const TensorView& t) {
  const int64_t n = t.NumElements();
  if (n == 0) return 0;
  uint64_t sum = 0;
  if (t.dtype == DType::kF32) {
    const auto* w = static_cast<const uint32_t*>(t.data);
    for (int64_t i = 0; i < n; ++i) sum += w[i];
  } else {
    const auto* w = static_cast<const uint16_t*>(t.data);
    for (int64_t i = 0; i < n; ++i) sum += w[i];
  }
  return sum;
}

uint64_t ElementBits(const TensorView& t, int64_t b, int64_t h, int64_t j,
                     int64_t e) {
  const auto* p = static_cast<const unsigned char*>(t.data) +
                  t.Offset(b, h, j, e) * DTypeSize(t.dtype);
  if (t.dtype == DType::kF32) {
    uint32_t w;
    std::memcpy(&w, p, sizeof(w));
    return w;
  }
  uint16_t w;
  std::memcpy(&w, p, sizeof(w));
  return w;
}

uint64_t PoisonBits(DType dtype) {
  return dtype == DType::kF32 ? 0xffffffffull : 0xffffull;
}

std::string Field(std::string_view name, int64_t v) {
  return std::string(name) + "=" + std::to_string(v);
}

// Prefill context: uniform in [-1, 1). A direct loop over the contiguous
// buffer, because a 16k-token Llama-2 context is 2^29 values per mode and the
// generic strided FillNormal (a Box-Muller per element) would take longer
// than the decode steps being measured.
void FillUniform(const TensorView& t, uint64_t seed, uint64_t stream) {
  Rng rng(seed, stream);
  const int64_t n = t.NumElements();
  if (t.dtype == DType::kF32) {
    float* p = t.As<float>();
    for (int64_t i = 0; i < n; ++i) p[i] = rng.Uniform(-1.0f, 1.0f);
  } else {
    bf16* p = t.As<bf16>();
    for (int64_t i = 0; i < n; ++i) p[i] = bf16::FromFloat(rng.Uniform(-1, 1));
  }
}

// Rng streams: prefill of layer l, then step s of layer l (q, k, v in order).
uint64_t PrefillStream(int64_t layer) { return static_cast<uint64_t>(layer); }
uint64_t StepStream(int64_t layers, int64_t step, int64_t layer) {
  return static_cast<uint64_t>(layers + step * layers + layer);
}

}  // namespace

Status DecodeConfig::Validate() const {
  auto bad = [](std::string m) {
    return Status::InvalidArgument("decode: " + std::move(m));
  };
  if (layers < 1) return bad(Field("layers", layers) + " must be >= 1");
  if (batch < 1) return bad(Field("batch", batch) + " must be >= 1");
  if (q_heads < 1) return bad(Field("q_heads", q_heads) + " must be >= 1");
  if (kv_heads < 1) return bad(Field("kv_heads", kv_heads) + " must be >= 1");
  if (q_heads % kv_heads != 0) {
    return bad(Field("kv_heads", kv_heads) + " does not divide " +
               Field("q_heads", q_heads));
  }
  if (head_dim < 1 || head_dim > kMaxHeadDim) {
    return bad(Field("head_dim", head_dim) + " outside [1, " +
               std::to_string(kMaxHeadDim) + "]");
  }
  if (start_len < 0) return bad(Field("start_len", start_len) + " is negative");
  if (!start_lens.empty()) {
    if (static_cast<int64_t>(start_lens.size()) != batch) {
      return bad("start_lens has " + std::to_string(start_lens.size()) +
                 " entries, expected " + Field("batch", batch));
    }
    for (size_t b = 0; b < start_lens.size(); ++b) {
      if (start_lens[b] < 0) {
        return bad("start_lens[" + std::to_string(b) +
                   "]=" + std::to_string(start_lens[b]) + " is negative");
      }
    }
  }
  if (steps < 0) return bad(Field("steps", steps) + " is negative");
  if (capacity < 0) return bad(Field("capacity", capacity) + " is negative");
  // Every size the session computes, in checked arithmetic: the context it
  // reaches, the cache, the prefill staging, the kept outputs.
  const auto reach = CheckedAdd(MaxStartLen(), steps);
  if (!reach) {
    return bad(Field("start_len", MaxStartLen()) + " + " +
               Field("steps", steps) + " overflows int64");
  }
  const int64_t cap = capacity > 0 ? capacity : *reach;
  if (!CheckedProduct({2, layers, batch, kv_heads, cap, head_dim, 4}) ||
      !CheckedProduct(
          {std::max<int64_t>(steps, 1), layers, batch, q_heads, head_dim, 4})) {
    return Status::ResourceExhausted(
        "decode: sizes overflow int64 bytes for " + Field("layers", layers) +
        ", " + Field("batch", batch) + ", " + Field("q_heads", q_heads) + ", " +
        Field("kv_heads", kv_heads) + ", " + Field("head_dim", head_dim) +
        ", " + Field("capacity", cap) + ", " + Field("steps", steps));
  }
  if (capacity > 0 && capacity < *reach) {
    return bad(Field("capacity", capacity) + " is less than the longest " +
               Field("start_len", MaxStartLen()) + " + " +
               Field("steps", steps));
  }
  if (Capacity() < 1) {
    return bad("capacity is 0: start_len=0 and steps=0 leave nothing to do");
  }
  return Status::Ok();
}

int64_t DecodeConfig::MaxStartLen() const {
  if (start_lens.empty()) return start_len;
  return *std::max_element(start_lens.begin(), start_lens.end());
}

int64_t DecodeConfig::Capacity() const {
  return capacity > 0 ? capacity : MaxStartLen() + steps;
}

AttentionProblem DecodeConfig::LargestProblem(DecodeMode mode) const {
  AttentionProblem p;
  p.batch = mode == DecodeMode::kInPlace ? batch : 1;
  p.q_heads = q_heads;
  p.kv_heads = kv_heads;
  p.head_dim = head_dim;
  p.dtype = dtype;
  p.layout = mode == DecodeMode::kInPlace ? layout : KvLayout::kBHSD;
  p.mask = MaskKind::kNone;  // q_len 1 at the end: sees every key
  p.q_lens.assign(static_cast<size_t>(p.batch), 1);
  p.kv_lens.assign(static_cast<size_t>(p.batch), Capacity());
  return p;
}

MemoryEstimate DecodeConfig::Memory(DecodeMode mode) const {
  const double l = static_cast<double>(layers);
  const double b = static_cast<double>(batch);
  const double hq = static_cast<double>(q_heads);
  const double hkv = static_cast<double>(kv_heads);
  const double d = static_cast<double>(head_dim);
  const double es = static_cast<double>(DTypeSize(dtype));
  // Capacity() in doubles: the sum may not fit (Validate says so).
  const double cap = capacity > 0 ? static_cast<double>(capacity)
                                  : static_cast<double>(MaxStartLen()) +
                                        static_cast<double>(steps);
  const std::string dims =
      Field("layers", layers) + " x " + Field("batch", batch) + " x " +
      Field("kv_heads", kv_heads) +
      " x capacity=" + std::to_string(static_cast<int64_t>(cap)) + " x " +
      Field("head_dim", head_dim) + " x " + std::string(DTypeName(dtype));
  MemoryEstimate e;
  if (mode == DecodeMode::kInPlace) {
    e.Add("kv cache (2 x " + dims + ")", {2, l, b, hkv, cap, d, es});
  } else {
    // Every layer's concatenated context, plus the len+1 copy of one
    // sequence's while it is being extended.
    e.Add("naive concat contexts (2 x " + dims + ")",
          {2, l, b, hkv, cap, d, es});
    e.Add("naive concat copy of one sequence", {2, hkv, cap, d, es});
  }
  e.Add("prefill staging (2 x " + Field("batch", batch) + " x " +
            Field("kv_heads", kv_heads) + " x " +
            Field("start_len", MaxStartLen()) + " x " +
            Field("head_dim", head_dim) + ")",
        {2, b, hkv, static_cast<double>(MaxStartLen()), d, es});
  e.Add("outputs (" + Field("steps", steps) + " x " + Field("layers", layers) +
            " x " + Field("batch", batch) + " x " + Field("q_heads", q_heads) +
            " x " + Field("head_dim", head_dim) + " x f32)",
        {std::max(static_cast<double>(steps), 1.0), l, b, hq, d, 4});
  e.Add("step inputs (q, new k, new v per layer)", {l, b, hq + 2 * hkv, d, es});
  return e;
}

int64_t DecodeConfig::NewTokenBytes() const {
  return 2 * layers * batch * kv_heads * head_dim * DTypeSize(dtype);
}

DecodeSession::DecodeSession(const DecodeConfig& config, DecodeMode mode)
    : config_(config), mode_(mode) {}

DecodeSession::~DecodeSession() = default;

StatusOr<std::unique_ptr<DecodeSession>> DecodeSession::Create(
    const DecodeConfig& config, DecodeMode mode) {
  ATTNKIT_RETURN_IF_ERROR(config.Validate());
  if (mode != DecodeMode::kInPlace && mode != DecodeMode::kNaiveConcat) {
    return Status::InvalidArgument(
        "decode: mode=" + std::to_string(static_cast<int>(mode)) +
        " is not naive_concat or in_place");
  }
  std::unique_ptr<DecodeSession> s(new DecodeSession(config, mode));
  // Started before anything the session owns is allocated, so the peak
  // includes the cache itself, not only what steps add to it.
  s->session_meter_ = std::make_unique<accounting::Meter>();
  ATTNKIT_RETURN_IF_ERROR(s->Init());
  ATTNKIT_RETURN_IF_ERROR(s->Prefill());
  s->held_bytes_ = s->session_meter_->Read().live_bytes;
  return s;
}

Status DecodeSession::Init() {
  const DecodeConfig& c = config_;
  ATTNKIT_ASSIGN_OR_RETURN(backend_, c.make_backend
                                         ? c.make_backend()
                                         : backends::MakeBackend(c.backend));

  // A backend in a worker reads the cache and inputs where they lie.
  shared_memory::Scope share(backend_->InWorkerProcess());
  problem_ = c.LargestProblem(DecodeMode::kInPlace);
  const int64_t cap = c.Capacity();
  // Size the backend for the longest context this session reaches.
  const AttentionProblem largest = c.LargestProblem(mode_);
  if (mode_ == DecodeMode::kInPlace) {
    KvCacheConfig kc;
    kc.layers = c.layers;
    kc.batch = c.batch;
    kc.kv_heads = c.kv_heads;
    kc.head_dim = c.head_dim;
    kc.capacity = cap;
    kc.dtype = c.dtype;
    kc.layout = c.layout;
    ATTNKIT_ASSIGN_OR_RETURN(KvCache cache, KvCache::Create(kc));
    // Poison: a kernel that reads past a sequence's length gets NaN, and the
    // comparison with the naive mode fails loudly instead of passing on zeros.
    cache.Clear(std::byte{kPoison});
    cache_.emplace(std::move(cache));
    stepper_.emplace(Stepper::InPlace(*backend_, *cache_));
    if (c.audit_cache) {
      // Every element starts as the poison.
      const uint64_t per_layer =
          static_cast<uint64_t>(2 * c.batch * c.kv_heads * cap * c.head_dim);
      expected_sum_.assign(static_cast<size_t>(c.layers),
                           per_layer * PoisonBits(c.dtype));
    }
  } else {
    naive_.reserve(static_cast<size_t>(c.layers));
    for (int64_t l = 0; l < c.layers; ++l) {
      naive_.emplace_back(c.batch, c.kv_heads, c.head_dim, c.dtype);
    }
    stepper_.emplace(Stepper::Naive(*backend_, naive_, problem_));
  }
  ATTNKIT_RETURN_IF_ERROR(backend_->ReserveWorkspace(largest));

  for (int64_t l = 0; l < c.layers; ++l) {
    q_.push_back(
        Tensor::Contiguous(c.dtype, {c.batch, c.q_heads, 1, c.head_dim}));
    new_k_.push_back(
        Tensor::Contiguous(c.dtype, {c.batch, c.kv_heads, 1, c.head_dim}));
    new_v_.push_back(
        Tensor::Contiguous(c.dtype, {c.batch, c.kv_heads, 1, c.head_dim}));
  }
  layer_steps_.resize(static_cast<size_t>(c.layers));
  outputs_ = Tensor::Contiguous(
      DType::kF32, {std::max<int64_t>(c.steps, 1) * c.layers * c.batch,
                    c.q_heads, 1, c.head_dim});
  one_token_.assign(static_cast<size_t>(c.batch), 1);
  records_.reserve(static_cast<size_t>(c.steps));
  return Status::Ok();
}

void DecodeSession::AuditRows(int64_t l, int64_t b, int64_t begin, int64_t n,
                              const TensorView& new_k,
                              const TensorView& new_v) {
  const KvCache::View full = cache_->Full(l);
  const uint64_t poison = PoisonBits(config_.dtype);
  const char* names[2] = {"k", "v"};
  const TensorView* caches[2] = {&full.k, &full.v};
  const TensorView* news[2] = {&new_k, &new_v};
  for (int which = 0; which < 2; ++which) {
    const TensorView& cache = *caches[which];
    for (int64_t h = 0; h < config_.kv_heads; ++h)
      for (int64_t t = 0; t <= n; ++t) {
        const int64_t j = begin + t;
        if (j >= cache.shape[2]) break;
        for (int64_t e = 0; e < config_.head_dim; ++e) {
          const uint64_t got = ElementBits(cache, b, h, j, e);
          const uint64_t want =
              t < n ? ElementBits(*news[which], b, h, t, e) : poison;
          if (t < n) expected_sum_[l] += want - poison;
          if (got == want || !cache_fault_.empty()) continue;
          cache_fault_ =
              "layer " + std::to_string(l) + " " + names[which] + "_cache[" +
              std::to_string(b) + "," + std::to_string(h) + "," +
              std::to_string(j) + "," + std::to_string(e) +
              "] = " + std::to_string(cache.Load(b, h, j, e)) +
              (t < n ? ", expected the appended " +
                           std::to_string(news[which]->Load(b, h, t, e)) +
                           " (bit-exact)"
                     : ", past the sequence's length " + std::to_string(j) +
                           ": the append wrote a slot it does not own");
        }
      }
  }
}

void DecodeSession::AuditSum(int64_t l, const char* when) {
  if (!cache_fault_.empty()) return;
  const KvCache::View full = cache_->Full(l);
  const uint64_t got = BitSum(full.k) + BitSum(full.v);
  if (got != expected_sum_[l]) {
    cache_fault_ =
        "layer " + std::to_string(l) + " " + when +
        ": the cache changed outside the appended tokens (the bit "
        "sum of its elements is off by " +
        std::to_string(static_cast<int64_t>(got - expected_sum_[l])) + ")";
  }
}

Status DecodeSession::Prefill() {
  const DecodeConfig& c = config_;
  const int64_t n = c.MaxStartLen();
  if (n == 0) return Status::Ok();
  std::vector<int64_t> lens(static_cast<size_t>(c.batch));
  for (int64_t b = 0; b < c.batch; ++b) lens[b] = c.StartLen(b);
  // One staging buffer for K and V of a layer, freed before the first step.
  shared_memory::Scope share(backend_->InWorkerProcess());
  Tensor k = Tensor::Contiguous(c.dtype, {c.batch, c.kv_heads, n, c.head_dim});
  Tensor v = Tensor::Contiguous(c.dtype, {c.batch, c.kv_heads, n, c.head_dim});
  for (int64_t l = 0; l < c.layers; ++l) {
    FillUniform(k.view, c.seed, 2 * PrefillStream(l));
    FillUniform(v.view, c.seed, 2 * PrefillStream(l) + 1);
    if (mode_ == DecodeMode::kInPlace) {
      ATTNKIT_RETURN_IF_ERROR(
          cache_->Append(l, k.view, v.view, lens, backend_.get()));
      if (c.audit_cache) {
        for (int64_t b = 0; b < c.batch; ++b) {
          AuditRows(l, b, 0, lens[b], k.view, v.view);
        }
        AuditSum(l, "after the prefill");
      }
    } else {
      ATTNKIT_RETURN_IF_ERROR(naive_[l].Append(k.view, v.view, lens).status());
    }
  }
  return Status::Ok();
}

void DecodeSession::FillStepInputs(int64_t step) {
  for (int64_t l = 0; l < config_.layers; ++l) {
    Rng rng(config_.seed, StepStream(config_.layers, step, l));
    FillNormal(q_[l].view, rng);
    FillNormal(new_k_[l].view, rng);
    FillNormal(new_v_[l].view, rng);
  }
}

Status DecodeSession::Step() {
  const DecodeConfig& c = config_;
  const int64_t step = steps_done();
  if (step >= c.steps) {
    return Status::FailedPrecondition("decode: all " + Field("steps", c.steps) +
                                      " already ran");
  }
  FillStepInputs(step);  // outside the meter: the model would produce these
  for (int64_t l = 0; l < c.layers; ++l) {
    LayerStep& in = layer_steps_[static_cast<size_t>(l)];
    in.q = q_[l].view;
    in.new_k = new_k_[l].view;
    in.new_v = new_v_[l].view;
    in.out = outputs_.view.Slice({(step * c.layers + l) * c.batch, 0, 0, 0},
                                 {c.batch, c.q_heads, 1, c.head_dim});
  }
  StepRecord rec;
  ATTNKIT_RETURN_IF_ERROR(stepper_->Step(problem_, layer_steps_, one_token_,
                                         &rec, session_meter_.get()));
  records_.push_back(rec);  // reserved at Create: no allocation
  if (c.audit_cache && mode_ == DecodeMode::kInPlace) {
    for (int64_t l = 0; l < c.layers; ++l) {
      for (int64_t b = 0; b < c.batch; ++b) {
        AuditRows(l, b, stepper_->length(b) - 1, 1, new_k_[l].view,
                  new_v_[l].view);
      }
      AuditSum(l, "after a step");
    }
  }
  return Status::Ok();
}

Status DecodeSession::Run() {
  while (steps_done() < config_.steps) ATTNKIT_RETURN_IF_ERROR(Step());
  return Status::Ok();
}

int64_t DecodeSession::peak_bytes() const {
  if (!accounting::AllocHooksInstalled()) return -1;
  int64_t peak = held_bytes_;
  for (const StepRecord& r : records_) peak = std::max(peak, r.peak_bytes);
  return peak;
}

int64_t DecodeSession::length(int64_t b) const { return stepper_->length(b); }

TensorView DecodeSession::query(int64_t layer) const { return q_[layer].view; }

TensorView DecodeSession::output(int64_t step, int64_t layer) const {
  const DecodeConfig& c = config_;
  assert(step >= 0 && step < steps_done() && layer >= 0 && layer < c.layers);
  return outputs_.view.Slice({(step * c.layers + layer) * c.batch, 0, 0, 0},
                             {c.batch, c.q_heads, 1, c.head_dim});
}

KvCache::View DecodeSession::naive_sequence(int64_t layer, int64_t b) const {
  if (mode_ != DecodeMode::kNaiveConcat) return {};
  return {naive_[layer].K(b), naive_[layer].V(b), naive_[layer].KScale(b),
          naive_[layer].VScale(b)};
}

}  // namespace attnkit::decode
