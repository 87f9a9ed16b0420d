// The naive KV update the slow frameworks perform every decode step
// (torch.cat(past, new) along the sequence): allocate a buffer for len + n
// tokens, copy the whole context into it, append the new tokens, free the old
// buffer. Its cost per step grows with the context length -- the behaviour
// attnkit's in-place KvCache removes, kept here so the meter can show both.
#ifndef ATTNKIT_REFERENCE_CONCAT_KV_H_
#define ATTNKIT_REFERENCE_CONCAT_KV_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/status.h"
#include "runtime/tensor.h"

namespace attnkit::reference {

class ConcatKv {
 public:
  ConcatKv(int64_t batch, int64_t kv_heads, int64_t head_dim, DType dtype);

  // new_k, new_v: [batch, kv_heads, >= max(new_lens), head_dim] in the
  // cache's dtype (f32 or bf16 for an i8 cache: quantized by QuantizeRowI8,
  // scales kept beside), any strides. Returns the bytes copied (old context
  // plus new tokens, K and V, and the scales), also reported to
  // accounting::RecordCopy.
  StatusOr<int64_t> Append(const TensorView& new_k, const TensorView& new_v,
                           std::span<const int64_t> new_lens);

  int64_t length(int64_t b) const { return seqs_[b].len; }
  // Sequence b's K or V as a [1, kv_heads, length(b), head_dim] BHSD view.
  TensorView K(int64_t b) const { return View(b, seqs_[b].k.get()); }
  TensorView V(int64_t b) const { return View(b, seqs_[b].v.get()); }
  // An i8 cache's scales of sequence b, [1, kv_heads, length(b), 1] (null
  // views otherwise).
  TensorView KScale(int64_t b) const { return ScaleView(b, seqs_[b].ks.get()); }
  TensorView VScale(int64_t b) const { return ScaleView(b, seqs_[b].vs.get()); }

 private:
  struct Seq {
    int64_t len = 0;
    std::unique_ptr<std::byte[]> k, v, ks, vs;
  };
  TensorView View(int64_t b, std::byte* data) const;
  TensorView ScaleView(int64_t b, std::byte* data) const;

  int64_t batch_, kv_heads_, head_dim_;
  DType dtype_;
  std::vector<Seq> seqs_;
};

}  // namespace attnkit::reference

#endif  // ATTNKIT_REFERENCE_CONCAT_KV_H_
