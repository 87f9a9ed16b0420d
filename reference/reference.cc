#include "reference/reference.h"

#include <Eigen/Dense>
#include <cmath>
#include <limits>

namespace attnkit::reference {
namespace {

using RowMatrix =
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using StridedMap = Eigen::Map<const RowMatrix, 0,
                              Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>>;

// The [rows, head_dim] matrix of view t at (b, h), as f32. f32 views are
// mapped in place through their strides (no copy); bf16 is widened into
// `scratch`.
StridedMap HeadMatrix(const TensorView& t, int64_t b, int64_t h, int64_t rows,
                      RowMatrix& scratch) {
  const int64_t cols = t.shape[3];
  if (t.dtype == DType::kF32) {
    const float* base =
        t.As<float>() + (rows > 0 && cols > 0 ? t.Offset(b, h, 0, 0) : 0);
    return StridedMap(base, rows, cols,
                      Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(
                          t.strides[2], t.strides[3]));
  }
  scratch.resize(rows, cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) scratch(r, c) = t.Load(b, h, r, c);
  return StridedMap(scratch.data(), rows, cols,
                    Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(cols, 1));
}

class ReferenceBackend final : public Backend {
 public:
  std::string_view name() const override { return "reference"; }
  Status Attention(const AttentionProblem& p,
                   const AttentionArgs& args) override {
    return reference::Attention(p, args);
  }
};

}  // namespace

Status Attention(const AttentionProblem& p, const AttentionArgs& args) {
  ATTNKIT_RETURN_IF_ERROR(ValidateArgs(p, args));
  const float scale = p.EffectiveScale();
  const float ninf = -std::numeric_limits<float>::infinity();
  RowMatrix q_scratch, k_scratch, v_scratch, s;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t ql = p.q_lens[b], kl = p.kv_lens[b];
    if (ql == 0) continue;
    for (int64_t kh = 0; kh < p.kv_heads; ++kh) {
      // K and V of this kv head serve all group_size() query heads (GQA by
      // head mapping: no repeated K/V).
      const StridedMap k = HeadMatrix(args.k, b, kh, kl, k_scratch);
      const StridedMap v = HeadMatrix(args.v, b, kh, kl, v_scratch);
      for (int64_t g = 0; g < p.group_size(); ++g) {
        const int64_t h = kh * p.group_size() + g;
        const StridedMap q = HeadMatrix(args.q, b, h, ql, q_scratch);
        s.noalias() = scale * (q * k.transpose());  // [ql, kl], materialized
        for (int64_t i = 0; i < ql; ++i) {
          const KeyRange r = VisibleKeys(p, b, i);
          for (int64_t j = 0; j < kl; ++j) {
            if (j < r.begin || j >= r.end) {
              s(i, j) = ninf;
            } else if (p.mask == MaskKind::kBias) {
              s(i, j) +=
                  args.bias.Load(b, args.bias.shape[1] == 1 ? 0 : h, i, j);
            }
          }
        }
        for (int64_t i = 0; i < ql; ++i) {
          float* out = args.out.As<float>() + args.out.Offset(b, h, i, 0);
          const float m = kl > 0 ? s.row(i).maxCoeff() : ninf;
          if (m == ninf) {  // fully masked row: zeros by definition
            for (int64_t d = 0; d < p.head_dim; ++d) out[d] = 0.0f;
            continue;
          }
          s.row(i) = (s.row(i).array() - m).exp();
          const float inv_sum = 1.0f / s.row(i).sum();
          Eigen::Map<Eigen::RowVectorXf>(out, p.head_dim).noalias() =
              (s.row(i) * v) * inv_sum;
        }
      }
    }
  }
  return Status::Ok();
}

std::unique_ptr<Backend> MakeReferenceBackend() {
  return std::make_unique<ReferenceBackend>();
}

}  // namespace attnkit::reference
