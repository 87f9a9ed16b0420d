#include "reference/reference.h"

#include <Eigen/Dense>
#include <cmath>
#include <limits>
#include <vector>

#include "reference/attention_block.h"

namespace attnkit::reference {
namespace {

using RowMatrix =
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using StridedMap = Eigen::Map<const RowMatrix, 0,
                              Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>>;

// Scratch that grows and never shrinks, so a backend that keeps one (and
// ReserveWorkspace sizes it) does not allocate on the decode path.
// std::vector, not an Eigen matrix: Eigen reallocates whenever the element
// count changes, and in decode the key count grows by one every step.
// Aligned to Eigen's largest packet: Eigen's vectorized sum and exp peel
// scalar elements up to the first aligned one, so with malloc's 16-byte
// alignment the rounding of a row's softmax -- and with it the naive error
// the tolerance is derived from -- changed with wherever the heap put the
// buffer, and a case's bound differed between a campaign and its replay.
using AlignedFloats = std::vector<float, Eigen::aligned_allocator<float>>;
struct Workspace {
  AlignedFloats q, k, v, s;

  static float* Get(AlignedFloats& buf, int64_t n) {
    if (static_cast<int64_t>(buf.size()) < n) {
      buf.resize(static_cast<size_t>(n));
    }
    return buf.data();
  }
  void Reserve(int64_t q_rows, int64_t kv_rows, int64_t dim) {
    Get(q, q_rows * dim);
    Get(k, kv_rows * dim);
    Get(v, kv_rows * dim);
    Get(s, q_rows * kv_rows);
  }
};

// The [rows, head_dim] matrix of view t at (b, h), as f32. f32 views are
// mapped in place through their strides (no copy); bf16 is widened into
// `scratch`, i8 dequantized into it (row r times scales[b, h, r]), as the
// frameworks that store a quantized cache do before their attention.
StridedMap HeadMatrix(const TensorView& t, int64_t b, int64_t h, int64_t rows,
                      AlignedFloats& scratch, const TensorView& scales = {}) {
  const int64_t cols = t.shape[3];
  if (t.dtype == DType::kF32) {
    const float* base =
        t.As<float>() + (rows > 0 && cols > 0 ? t.Offset(b, h, 0, 0) : 0);
    return StridedMap(base, rows, cols,
                      Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(
                          t.strides[2], t.strides[3]));
  }
  float* out = Workspace::Get(scratch, rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float scale = t.dtype == DType::kI8 ? scales.Load(b, h, r, 0) : 1.0f;
    for (int64_t c = 0; c < cols; ++c) {
      out[r * cols + c] = t.Load(b, h, r, c) * scale;
    }
  }
  return StridedMap(out, rows, cols,
                    Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(cols, 1));
}

Status AttentionWith(const AttentionProblem& p, const AttentionArgs& args,
                     Workspace& ws);

class ReferenceBackend final : public Backend {
 public:
  std::string_view name() const override { return "reference"; }
  Status Attention(const AttentionProblem& p,
                   const AttentionArgs& args) override {
    return AttentionWith(p, args, ws_);
  }
  Status SupportsBlock(const AttentionBlockProblem& p) const override {
    return p.Validate();
  }
  Status AttentionBlock(const AttentionBlockProblem& p,
                        const AttentionBlockArgs& args) override {
    return reference::AttentionBlock(p, args);
  }
  Status ReserveWorkspace(const AttentionProblem& largest) override {
    ATTNKIT_RETURN_IF_ERROR(largest.Validate());
    ws_.Reserve(largest.max_q_len(), largest.max_kv_len(), largest.head_dim);
    return Status::Ok();
  }

 private:
  Workspace ws_;
};

Status AttentionWith(const AttentionProblem& p, const AttentionArgs& args,
                     Workspace& ws) {
  ATTNKIT_RETURN_IF_ERROR(ValidateArgs(p, args));
  ATTNKIT_RETURN_IF_ERROR(CheckKvScaleValues(p, args.k_scale, args.v_scale));
  const float scale = p.EffectiveScale();
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t ql = p.q_lens[b], kl = p.kv_lens[b];
    if (ql == 0) continue;
    for (int64_t kh = 0; kh < p.kv_heads; ++kh) {
      // K and V of this kv head serve all group_size() query heads (GQA by
      // head mapping: no repeated K/V).
      const StridedMap k = HeadMatrix(args.k, b, kh, kl, ws.k, args.k_scale);
      const StridedMap v = HeadMatrix(args.v, b, kh, kl, ws.v, args.v_scale);
      for (int64_t g = 0; g < p.group_size(); ++g) {
        const int64_t h = kh * p.group_size() + g;
        const StridedMap q = HeadMatrix(args.q, b, h, ql, ws.q);
        Eigen::Map<RowMatrix> s(Workspace::Get(ws.s, ql * kl), ql, kl);
        // lazyProduct: coefficient-based, so no Eigen temporary is
        // heap-allocated for the strided operands (a GEMV through Eigen's
        // BLAS path copies a non-direct-access operand on every call, which
        // a decode step must not do).
        s.noalias() = scale * q.lazyProduct(k.transpose());  // materialized
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
          // P.V as rank-1 updates, keys in order: the same summation order
          // for every layout (outputs are bit-identical across layouts) and
          // no temporary.
          const int64_t vs_row = v.outerStride(), vs_col = v.innerStride();
          for (int64_t d = 0; d < p.head_dim; ++d) out[d] = 0.0f;
          for (int64_t j = 0; j < kl; ++j) {
            const float w = s(i, j);
            const float* vj = v.data() + j * vs_row;
            for (int64_t d = 0; d < p.head_dim; ++d)
              out[d] += w * vj[d * vs_col];
          }
          for (int64_t d = 0; d < p.head_dim; ++d) out[d] *= inv_sum;
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Status Attention(const AttentionProblem& p, const AttentionArgs& args) {
  Workspace ws;
  return AttentionWith(p, args, ws);
}

std::unique_ptr<Backend> MakeReferenceBackend() {
  return std::make_unique<ReferenceBackend>();
}

}  // namespace attnkit::reference
