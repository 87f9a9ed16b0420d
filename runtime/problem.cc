#include "runtime/problem.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "runtime/limits.h"
#include "runtime/parse.h"

namespace attnkit {
namespace {

std::string Join(const std::vector<int64_t>& v, char sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += sep;
    s += std::to_string(v[i]);
  }
  return s;
}

}  // namespace

Status AttentionProblem::Validate() const {
  auto bad = [](std::string m) {
    return Status::InvalidArgument(std::move(m));
  };
  auto field = [](std::string_view name, int64_t v) {
    return std::string(name) + "=" + std::to_string(v);
  };
  if (batch < 1) return bad(field("batch", batch) + " must be >= 1");
  if (q_heads < 1) return bad(field("q_heads", q_heads) + " must be >= 1");
  if (kv_heads < 1) return bad(field("kv_heads", kv_heads) + " must be >= 1");
  if (q_heads % kv_heads != 0) {
    return bad(field("kv_heads", kv_heads) + " does not divide " +
               field("q_heads", q_heads));
  }
  if (head_dim < 1) return bad(field("head_dim", head_dim) + " must be >= 1");
  if (head_dim > kMaxHeadDim) {
    return bad(field("head_dim", head_dim) + " exceeds the maximum " +
               std::to_string(kMaxHeadDim));
  }
  if (static_cast<int64_t>(q_lens.size()) != batch) {
    return bad("q_lens has " + std::to_string(q_lens.size()) + " entries but " +
               field("batch", batch));
  }
  if (static_cast<int64_t>(kv_lens.size()) != batch) {
    return bad("kv_lens has " + std::to_string(kv_lens.size()) +
               " entries but " + field("batch", batch));
  }
  for (int64_t b = 0; b < batch; ++b) {
    const std::string idx = "[" + std::to_string(b) + "]";
    if (q_lens[b] < 0) {
      return bad("q_lens" + idx + "=" + std::to_string(q_lens[b]) +
                 " must be >= 0");
    }
    if (kv_lens[b] < 0) {
      return bad("kv_lens" + idx + "=" + std::to_string(kv_lens[b]) +
                 " must be >= 0");
    }
  }
  if (!kMaskKindNames.IsValid(mask)) {
    return bad("mask=" + std::to_string(static_cast<int>(mask)) +
               " is not a MaskKind");
  }
  if (!kDTypeNames.IsValid(dtype)) {
    return bad("dtype=" + std::to_string(static_cast<int>(dtype)) +
               " is not a DType");
  }
  if (dtype == DType::kI8) {
    return bad(
        "dtype=i8 is a K/V storage only: q is f32 or bf16 (set kv_dtype=i8 "
        "for a quantized KV cache)");
  }
  if (kv_dtype && !kDTypeNames.IsValid(*kv_dtype)) {
    return bad("kv_dtype=" + std::to_string(static_cast<int>(*kv_dtype)) +
               " is not a DType");
  }
  if (kv_dtype && *kv_dtype != dtype && *kv_dtype != DType::kI8) {
    return bad("kv_dtype=" + std::string(DTypeName(*kv_dtype)) +
               " differs from dtype=" + std::string(DTypeName(dtype)) +
               ": K/V are stored in q's dtype or in i8");
  }
  if (!kKvLayoutNames.IsValid(layout)) {
    return bad("layout=" + std::to_string(static_cast<int>(layout)) +
               " is not a KvLayout");
  }
  if (mask == MaskKind::kWindow && window < 1) {
    return bad(field("window", window) + " must be >= 1 with mask=window");
  }
  if (mask != MaskKind::kWindow && window != 0) {
    return bad(field("window", window) + " is only meaningful with " +
               "mask=window (mask=" + std::string(MaskKindName(mask)) + ")");
  }
  if (mask == MaskKind::kCausal || mask == MaskKind::kWindow) {
    for (int64_t b = 0; b < batch; ++b) {
      if (q_lens[b] > kv_lens[b]) {
        const std::string idx = "[" + std::to_string(b) + "]";
        return bad("q_lens" + idx + "=" + std::to_string(q_lens[b]) +
                   " exceeds kv_lens" + idx + "=" + std::to_string(kv_lens[b]) +
                   " under mask=" + std::string(MaskKindName(mask)));
      }
    }
  }
  if (scale && (!std::isfinite(*scale) || *scale == 0.0f ||
                std::fabs(*scale) > kMaxAbsScale)) {
    std::ostringstream os;
    os << "scale=" << *scale << " must be finite, non-zero and at most "
       << kMaxAbsScale << " in magnitude";
    return bad(os.str());
  }
  // Every tensor's element count, its byte size and the FLOP count must fit
  // in int64 so no kernel index can overflow.
  const int64_t mq = max_q_len(), mkv = max_kv_len();
  struct Check {
    const char* what;
    std::optional<int64_t> n;
  };
  const Check checks[] = {
      {"q (batch*q_heads*max_q_len*head_dim*4)",
       CheckedProduct({batch, q_heads, mq, head_dim, 4})},
      {"k/v (batch*kv_heads*max_kv_len*head_dim*4)",
       CheckedProduct({batch, kv_heads, mkv, head_dim, 4})},
      {"scores (batch*q_heads*max_q_len*max_kv_len*4)",
       CheckedProduct({batch, q_heads, mq, mkv, 4})},
      {"flops (4*batch*q_heads*max_q_len*max_kv_len*head_dim)",
       CheckedProduct({batch, q_heads, mq, mkv, head_dim, 4})},
  };
  for (const Check& c : checks) {
    if (!c.n) {
      return bad(std::string("size of ") + c.what + " overflows int64 for " +
                 field("batch", batch) + ", " + field("q_heads", q_heads) +
                 ", " + field("kv_heads", kv_heads) + ", " +
                 field("head_dim", head_dim) + ", " + field("max_q_len", mq) +
                 ", " + field("max_kv_len", mkv));
    }
  }
  return Status::Ok();
}

float AttentionProblem::EffectiveScale() const {
  return scale ? *scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

int64_t AttentionProblem::max_q_len() const {
  return q_lens.empty() ? 0 : *std::max_element(q_lens.begin(), q_lens.end());
}

int64_t AttentionProblem::max_kv_len() const {
  return kv_lens.empty() ? 0
                         : *std::max_element(kv_lens.begin(), kv_lens.end());
}

namespace {

// Sum of min(x, w) for x in [lo, hi] (lo >= 1), in closed form.
double SumMin(double lo, double hi, double w) {
  if (hi < lo) return 0;
  auto sum_range = [](double a, double b) { return (a + b) * (b - a + 1) / 2; };
  if (hi <= w) return sum_range(lo, hi);
  if (lo > w) return w * (hi - lo + 1);
  return sum_range(lo, w) + w * (hi - w);
}

}  // namespace

double AttentionProblem::Flops() const {
  // (query, key) pairs the mask lets through, per sequence in closed form so
  // the cost does not depend on the lengths (which may be huge when this is
  // asked of an untrusted problem).
  double visible = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const double q = static_cast<double>(q_lens[b]);
    const double kv = static_cast<double>(kv_lens[b]);
    switch (mask) {
      case MaskKind::kNone:
      case MaskKind::kBias:
        visible += q * kv;
        break;
      case MaskKind::kCausal:  // query i sees kv - q + i + 1 keys
        visible += SumMin(kv - q + 1, kv, kv);
        break;
      case MaskKind::kWindow:  // ... capped at the window
        visible += SumMin(kv - q + 1, kv, static_cast<double>(window));
        break;
    }
  }
  return 4.0 * visible * static_cast<double>(q_heads) *
         static_cast<double>(head_dim);
}

std::string AttentionProblem::ToString() const {
  std::string s =
      "b=" + std::to_string(batch) + ",hq=" + std::to_string(q_heads) +
      ",hkv=" + std::to_string(kv_heads) + ",d=" + std::to_string(head_dim) +
      ",q=" + Join(q_lens, ':') + ",kv=" + Join(kv_lens, ':') +
      ",mask=" + std::string(MaskKindName(mask));
  if (mask == MaskKind::kWindow || window != 0) {
    s += ":" + std::to_string(window);
  }
  if (scale) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.9g", static_cast<double>(*scale));
    s += ",scale=";
    s += buf;
  }
  s += ",dtype=" + std::string(DTypeName(dtype));
  if (kv_dtype) s += ",kv_dtype=" + std::string(DTypeName(*kv_dtype));
  s += ",layout=" + std::string(KvLayoutName(layout));
  return s;
}

StatusOr<AttentionProblem> ParseProblem(std::string_view text) {
  AttentionProblem p;
  p.q_lens.clear();
  p.kv_lens.clear();
  auto bad = [&](std::string m) {
    return Status::InvalidArgument("problem '" + std::string(text) + "': " + m);
  };
  auto parse_list = [&](std::string_view v, std::vector<int64_t>* out) -> bool {
    out->clear();
    size_t start = 0;
    while (true) {
      size_t end = v.find(':', start);
      auto n = ParseInt64(v.substr(start, end == std::string_view::npos
                                              ? std::string_view::npos
                                              : end - start));
      if (!n) return false;
      out->push_back(*n);
      if (end == std::string_view::npos) return true;
      start = end + 1;
    }
  };
  bool seen_b = false, seen_q = false, seen_kv = false;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view item = text.substr(start, end - start);
    start = end + 1;
    if (item.empty()) {
      if (end == text.size()) break;
      continue;
    }
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return bad("item '" + std::string(item) + "' is not key=value");
    }
    const std::string_view key = item.substr(0, eq), val = item.substr(eq + 1);
    const std::string ks(key), vs(val);
    auto int_field = [&](int64_t* dst) -> Status {
      auto n = ParseInt64(val);
      if (!n) return bad(ks + "=" + vs + " is not an integer");
      *dst = *n;
      return Status::Ok();
    };
    if (key == "b") {
      ATTNKIT_RETURN_IF_ERROR(int_field(&p.batch));
      seen_b = true;
    } else if (key == "hq") {
      ATTNKIT_RETURN_IF_ERROR(int_field(&p.q_heads));
    } else if (key == "hkv") {
      ATTNKIT_RETURN_IF_ERROR(int_field(&p.kv_heads));
    } else if (key == "d") {
      ATTNKIT_RETURN_IF_ERROR(int_field(&p.head_dim));
    } else if (key == "q") {
      if (!parse_list(val, &p.q_lens)) return bad("q=" + vs + " is not a:b:…");
      seen_q = true;
    } else if (key == "kv") {
      if (!parse_list(val, &p.kv_lens)) {
        return bad("kv=" + vs + " is not a:b:…");
      }
      seen_kv = true;
    } else if (key == "mask") {
      const size_t colon = val.find(':');
      auto m = ParseMaskKind(val.substr(0, colon));
      if (!m) {
        // The table's names, the window's with its width: none|causal|...
        std::string names;
        for (const auto& e : kMaskKindNames) {
          names += (names.empty() ? "" : "|") + std::string(e.name) +
                   (e.value == MaskKind::kWindow ? ":W" : "");
        }
        return bad("mask=" + vs + " is not " + names);
      }
      p.mask = *m;
      if (colon != std::string_view::npos) {
        auto w = ParseInt64(val.substr(colon + 1));
        if (!w) return bad("mask=" + vs + " has a non-integer window");
        p.window = *w;
      }
    } else if (key == "scale") {
      char* endp = nullptr;
      const float f = std::strtof(vs.c_str(), &endp);
      if (vs.empty() || endp != vs.c_str() + vs.size()) {
        return bad("scale=" + vs + " is not a number");
      }
      p.scale = f;
    } else if (key == "dtype") {
      auto d = ParseDType(val);
      if (!d) return bad(kDTypeNames.NotOneOf("dtype", vs));
      p.dtype = *d;
    } else if (key == "kv_dtype") {
      auto d = ParseDType(val);
      if (!d) return bad(kDTypeNames.NotOneOf("kv_dtype", vs));
      p.kv_dtype = *d;
    } else if (key == "layout") {
      auto l = ParseKvLayout(val);
      if (!l) return bad(kKvLayoutNames.NotOneOf("layout", vs));
      p.layout = *l;
    } else {
      return bad("unknown key '" + ks + "'");
    }
  }
  // Lengths are never invented: a default sized by an untrusted b= could
  // allocate without bound.
  if (!seen_q) return bad("missing q=<len>:<len>:...");
  if (!seen_kv) return bad("missing kv=<len>:<len>:...");
  if (!seen_b) p.batch = static_cast<int64_t>(p.q_lens.size());
  return p;
}

KeyRange VisibleKeys(const AttentionProblem& p, int64_t b, int64_t i) {
  const int64_t kv = p.kv_lens[b];
  const int64_t pos = kv - p.q_lens[b] + i;
  switch (p.mask) {
    case MaskKind::kNone:
    case MaskKind::kBias:
      return {0, kv};
    case MaskKind::kCausal:
      return {0, std::min(pos + 1, kv)};
    case MaskKind::kWindow:
      return {std::max<int64_t>(0, pos - p.window + 1), std::min(pos + 1, kv)};
  }
  return {0, 0};
}

std::array<int64_t, 4> KvStrides(KvLayout layout, bool is_v,
                                 const std::array<int64_t, 4>& shape) {
  switch (layout) {
    case KvLayout::kBHSD:
      return PermutedStrides(shape, {0, 1, 2, 3});
    case KvLayout::kBSHD:
      return PermutedStrides(shape, {0, 2, 1, 3});
    case KvLayout::kTransposedV:
      return is_v ? PermutedStrides(shape, {0, 1, 3, 2})
                  : PermutedStrides(shape, {0, 1, 2, 3});
  }
  return ContiguousStrides(shape);
}

Status CheckTensorView(std::string_view name, const TensorView& t, DType dtype,
                       const std::array<int64_t, 4>& min_shape,
                       bool exact_dims01, int64_t exact_dim3,
                       int unit_stride_dim) {
  auto bad = [&](std::string m) {
    return Status::InvalidArgument(std::string(name) + ": " + m + " (" +
                                   t.DebugString() + ")");
  };
  if (t.dtype != dtype) {
    return bad("dtype=" + std::string(DTypeName(t.dtype)) + ", expected " +
               std::string(DTypeName(dtype)));
  }
  for (int i = 0; i < 4; ++i) {
    if (t.shape[i] < 0) {
      return bad("shape[" + std::to_string(i) +
                 "]=" + std::to_string(t.shape[i]) + " is negative");
    }
    if (t.strides[i] < 0) {
      return bad("strides[" + std::to_string(i) +
                 "]=" + std::to_string(t.strides[i]) + " is negative");
    }
  }
  for (int i = 0; i < 2; ++i) {
    if (exact_dims01 ? t.shape[i] != min_shape[i] : t.shape[i] < min_shape[i]) {
      return bad("shape[" + std::to_string(i) +
                 "]=" + std::to_string(t.shape[i]) + ", expected " +
                 std::to_string(min_shape[i]));
    }
  }
  if (t.shape[2] < min_shape[2]) {
    return bad("shape[2]=" + std::to_string(t.shape[2]) +
               " is shorter than the longest length " +
               std::to_string(min_shape[2]));
  }
  if (exact_dim3 >= 0 ? t.shape[3] != exact_dim3 : t.shape[3] < min_shape[3]) {
    return bad("shape[3]=" + std::to_string(t.shape[3]) + ", expected " +
               std::to_string(exact_dim3 >= 0 ? exact_dim3 : min_shape[3]));
  }
  if (t.NumElements() > 0) {
    if (t.data == nullptr) return bad("data is null");
    if (unit_stride_dim >= 0 && t.shape[unit_stride_dim] > 1 &&
        t.strides[unit_stride_dim] != 1) {
      return bad("strides[" + std::to_string(unit_stride_dim) +
                 "]=" + std::to_string(t.strides[unit_stride_dim]) +
                 " must be 1 for this layout");
    }
  }
  return Status::Ok();
}

Status ValidateArgs(const AttentionProblem& p, const AttentionArgs& a) {
  ATTNKIT_RETURN_IF_ERROR(p.Validate());
  const int64_t mq = p.max_q_len();
  ATTNKIT_RETURN_IF_ERROR(CheckTensorView("q", a.q, p.dtype,
                                          {p.batch, p.q_heads, mq, p.head_dim},
                                          true, p.head_dim, 3));
  ATTNKIT_RETURN_IF_ERROR(CheckTensorView("out", a.out, DType::kF32,
                                          {p.batch, p.q_heads, mq, p.head_dim},
                                          true, p.head_dim, 3));
  return CheckKvAndBias(p, {a.k, a.v, a.k_scale, a.v_scale}, a.bias, "k", "v");
}

Status CheckKvAndBias(const AttentionProblem& p, const KvViews& kv,
                      const TensorView& bias, std::string_view k_name,
                      std::string_view v_name) {
  const int64_t mq = p.max_q_len(), mkv = p.max_kv_len();
  const DType kv_dtype = p.KvDType();
  ATTNKIT_RETURN_IF_ERROR(CheckTensorView(
      k_name, kv.k, kv_dtype, {p.batch, p.kv_heads, mkv, p.head_dim}, true,
      p.head_dim, 3));
  ATTNKIT_RETURN_IF_ERROR(CheckTensorView(
      v_name, kv.v, kv_dtype, {p.batch, p.kv_heads, mkv, p.head_dim}, true,
      p.head_dim, p.layout == KvLayout::kTransposedV ? 2 : 3));
  for (const auto& [name, scale] :
       {std::pair{k_name, &kv.k_scale}, std::pair{v_name, &kv.v_scale}}) {
    const std::string scale_name = std::string(name) + "_scale";
    if (kv_dtype == DType::kI8) {
      if (scale->is_null() && mkv > 0) {
        return Status::InvalidArgument(
            scale_name + ": missing: " + std::string(name) +
            " is i8 and needs one f32 scale per token and kv head");
      }
      ATTNKIT_RETURN_IF_ERROR(CheckTensorView(scale_name, *scale, DType::kF32,
                                              {p.batch, p.kv_heads, mkv, 1},
                                              true, 1, 2));
    } else if (!scale->is_null()) {
      return Status::InvalidArgument(
          scale_name + ": given but " + std::string(name) + " is " +
          std::string(DTypeName(kv_dtype)) + " (scales are for i8 K/V)");
    }
  }
  if (p.mask == MaskKind::kBias) {
    const int64_t bh = bias.shape[1];
    if (bh != 1 && bh != p.q_heads) {
      return Status::InvalidArgument(
          "bias: shape[1]=" + std::to_string(bh) + " must be 1 or q_heads=" +
          std::to_string(p.q_heads) + " (" + bias.DebugString() + ")");
    }
    ATTNKIT_RETURN_IF_ERROR(CheckTensorView(
        "bias", bias, DType::kF32, {p.batch, bh, mq, mkv}, true, -1, -1));
  } else if (!bias.is_null()) {
    return Status::InvalidArgument(
        "bias: given but mask=" + std::string(MaskKindName(p.mask)) +
        " (use mask=bias)");
  }
  return Status::Ok();
}

Status CheckKvScaleValues(const AttentionProblem& p, const TensorView& k_scale,
                          const TensorView& v_scale, std::string_view k_name,
                          std::string_view v_name) {
  if (!p.quantized_kv()) return Status::Ok();
  for (const auto& [name, t] :
       {std::pair{k_name, &k_scale}, std::pair{v_name, &v_scale}}) {
    const float* base = static_cast<const float*>(t->data);
    for (int64_t b = 0; b < p.batch; ++b) {
      for (int64_t h = 0; h < p.kv_heads; ++h) {
        for (int64_t j = 0; j < p.kv_lens[b]; ++j) {
          const float s = base[t->Offset(b, h, j, 0)];
          if (!(std::isfinite(s) && s > 0.0f)) {
            std::ostringstream os;
            os << name << "[" << b << "," << h << "," << j << "]=" << s
               << " must be finite and positive";
            return Status::InvalidArgument(os.str());
          }
        }
      }
    }
  }
  return Status::Ok();
}

std::array<int64_t, 4> KvScaleStrides(const std::array<int64_t, 4>& shape) {
  return ContiguousStrides(shape);
}

}  // namespace attnkit
