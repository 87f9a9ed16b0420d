// The attention problem: shapes, mask, scale, dtype and KV layout, and the
// tensors a backend reads and writes. Everything a user can get wrong is
// checked by Validate()/ValidateArgs(), which name the bad field and value.
#ifndef ATTNKIT_RUNTIME_PROBLEM_H_
#define ATTNKIT_RUNTIME_PROBLEM_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/enum_table.h"
#include "runtime/status.h"
#include "runtime/tensor.h"

namespace attnkit {

// Query i of a sequence with lengths (q_len, kv_len) sits at absolute position
// p = kv_len - q_len + i (the query block is aligned to the END of the
// context, so decode's single query sees everything).
//   kNone   : every key j < kv_len.
//   kCausal : keys j <= p.                (requires q_len <= kv_len)
//   kWindow : keys p - window < j <= p, i.e. the last `window` positions up to
//             and including its own.      (requires q_len <= kv_len)
//   kBias   : every key, plus bias[b, h, i, j] (f32; -inf masks a key).
// A row that sees no key (kv_len == 0, or a bias row of -inf) outputs zeros.
enum class MaskKind : uint8_t { kNone = 0, kCausal, kWindow, kBias };

// Memory layout of K and V (strides of their [batch, kv_heads, seq, dim]
// views):
//   kBHSD        : K and V are [b][h][s][d].
//   kBSHD        : K and V are [b][s][h][d] (token-major, as projections emit).
//   kTransposedV : K is [b][h][s][d]; V is [b][h][d][s] so P.V reads V
//                  contiguously along the sequence.
enum class KvLayout : uint8_t { kBHSD = 0, kBSHD, kTransposedV };

inline constexpr auto kMaskKindNames = MakeEnumTable<MaskKind>({
    {MaskKind::kNone, "none"},
    {MaskKind::kCausal, "causal"},
    {MaskKind::kWindow, "window"},
    {MaskKind::kBias, "bias"},
});
static_assert(kMaskKindNames.RoundTrips());
inline constexpr auto kKvLayoutNames = MakeEnumTable<KvLayout>({
    {KvLayout::kBHSD, "bhsd"},
    {KvLayout::kBSHD, "bshd"},
    {KvLayout::kTransposedV, "tv"},
});
static_assert(kKvLayoutNames.RoundTrips());

inline std::string_view MaskKindName(MaskKind m) {
  return kMaskKindNames.Name(m);
}
inline std::string_view KvLayoutName(KvLayout l) {
  return kKvLayoutNames.Name(l);
}
inline std::optional<MaskKind> ParseMaskKind(std::string_view s) {
  return kMaskKindNames.Parse(s);
}
inline std::optional<KvLayout> ParseKvLayout(std::string_view s) {
  return kKvLayoutNames.Parse(s);
}

inline constexpr int64_t kMaxHeadDim = 1024;
// Logits scale * q.k must stay finite in f32 (< 3.4e38): with |q|, |k| = O(1)
// and head_dim <= 1024, |q.k| < ~3e4, so |scale| <= 1e6 keeps logits below
// ~1e11, far from overflow, while covering every scale a model uses (they are
// 1/sqrt(head_dim) or a small multiple). Larger inputs are the caller's to
// keep finite, as with any f32 computation.
inline constexpr float kMaxAbsScale = 1e6f;

struct AttentionProblem {
  int64_t batch = 1;
  int64_t q_heads = 1;
  int64_t kv_heads = 1;  // GQA/MQA: q_heads % kv_heads == 0
  int64_t head_dim = 64;
  std::vector<int64_t> q_lens{1};   // one per sequence; 0 allowed
  std::vector<int64_t> kv_lens{1};  // one per sequence; 0 allowed
  MaskKind mask = MaskKind::kNone;
  int64_t window = 0;          // only with MaskKind::kWindow, must be >= 1
  std::optional<float> scale;  // default 1/sqrt(head_dim)
  DType dtype = DType::kF32;   // storage of q (and k, v); math is f32
  // K/V storage when it differs from q's: only i8 (a quantized cache, with
  // k_scale/v_scale in the args). Unset: K/V are in `dtype`.
  std::optional<DType> kv_dtype;
  KvLayout layout = KvLayout::kBHSD;

  Status Validate() const;

  DType KvDType() const { return kv_dtype.value_or(dtype); }
  bool quantized_kv() const { return KvDType() == DType::kI8; }
  float EffectiveScale() const;
  int64_t max_q_len() const;
  int64_t max_kv_len() const;
  int64_t group_size() const { return q_heads / kv_heads; }  // q per kv head
  // The kv head that query head h reads (GQA by index, never by copy).
  int64_t KvHeadOf(int64_t q_head) const { return q_head / group_size(); }
  // Multiply-adds of QK^T plus PV over visible keys, times 2: the FLOP count
  // benchmarks report.
  double Flops() const;

  // A canonical one-line form, e.g.
  //   b=2,hq=8,hkv=2,d=64,q=3:1,kv=17:300,mask=causal,dtype=f32,layout=bhsd
  // (",kv_dtype=i8" after the dtype when kv_dtype is set).
  // ParseProblem(ToString()) round-trips exactly.
  std::string ToString() const;
};

StatusOr<AttentionProblem> ParseProblem(std::string_view text);

// Keys [begin, end) that query i of sequence b may see under the mask's
// structure (bias entries of -inf can hide more).
struct KeyRange {
  int64_t begin = 0;
  int64_t end = 0;
  bool empty() const { return end <= begin; }
};
KeyRange VisibleKeys(const AttentionProblem& p, int64_t b, int64_t i);

// The tensors of one attention call. Logical shapes are always canonical:
//   q, out : [batch, q_heads,  >= max_q_len,  head_dim]
//   k, v   : [batch, kv_heads, >= max_kv_len, head_dim]
//   bias   : [batch, q_heads or 1, >= max_q_len, >= max_kv_len] (kBias only)
//   k_scale, v_scale : [batch, kv_heads, >= max_kv_len, 1], f32, unit stride
//            along seq (i8 K/V only; null otherwise): element (b, h, j, 0)
//            is the scale of token j's row, k[b, h, j, :] * k_scale[b, h, j]
//            is the key (QuantizeRowI8). Finite and positive
//            (CheckKvScaleValues).
// q is in the problem's dtype, k and v in its KvDType(); bias and out are
// f32. Extents may exceed
// the lengths (a KV-cache prefix keeps its capacity strides). Backends write
// out rows i < q_lens[b] only. The layout fixes which dims are unit-stride:
// d for q, out and k; d for v except kTransposedV, where it is s.
struct AttentionArgs {
  TensorView q, k, v, bias, out;
  TensorView k_scale, v_scale;
};

Status ValidateArgs(const AttentionProblem& p, const AttentionArgs& args);

// The K and V views (named k_name, v_name in errors), their scales (named
// k_name + "_scale", ...: present exactly when K/V are i8) and the bias of
// `p`: what ValidateArgs checks of them, for callers whose K/V are a cache.
// Shapes, dtypes and strides only, O(1).
struct KvViews {
  TensorView k, v, k_scale, v_scale;
};
Status CheckKvAndBias(const AttentionProblem& p, const KvViews& kv,
                      const TensorView& bias, std::string_view k_name,
                      std::string_view v_name);

// The values of an i8 K/V's scales: every scale a row within the lengths
// reads is finite and positive; the error names the tensor, the element and
// its value. O(batch * kv_heads * max_kv_len) reads, so the fast backends do
// not run it per call (a decode step would read ~3% more bytes, single-
// threaded): scales come from QuantizeRowI8 (the cache's append, the
// tester's inputs), which produces only such values; the reference, the
// oracle and the tester check them. Ok for K/V that are not i8.
Status CheckKvScaleValues(const AttentionProblem& p, const TensorView& k_scale,
                          const TensorView& v_scale,
                          std::string_view k_name = "k_scale",
                          std::string_view v_name = "v_scale");

// Strides of an i8 K/V's scale tensor [batch, kv_heads, seq, 1]: [b][h][s].
std::array<int64_t, 4> KvScaleStrides(const std::array<int64_t, 4>& shape);

// One tensor argument against what it must be: `dtype`; dims 0 and 1 equal
// to min_shape's (`exact_dims01`) or at least them; dim 2 at least
// min_shape[2]; dim 3 equal to `exact_dim3` (when >= 0) or at least
// min_shape[3]; no negative extent or stride; data present unless empty;
// stride 1 along `unit_stride_dim` (when >= 0). The error names `name`, the
// field and its value, and the whole view.
Status CheckTensorView(std::string_view name, const TensorView& t, DType dtype,
                       const std::array<int64_t, 4>& min_shape,
                       bool exact_dims01, int64_t exact_dim3,
                       int unit_stride_dim);

// Strides of a K or V tensor of shape [batch, kv_heads, seq, head_dim] in
// `layout` (`is_v` selects V's layout).
std::array<int64_t, 4> KvStrides(KvLayout layout, bool is_v,
                                 const std::array<int64_t, 4>& shape);

}  // namespace attnkit

#endif  // ATTNKIT_RUNTIME_PROBLEM_H_
