// The backend interface every attention implementation provides. The list of
// the implementations a build has is the registry, backends/registry.h.
#ifndef ATTNKIT_RUNTIME_BACKEND_H_
#define ATTNKIT_RUNTIME_BACKEND_H_

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/attention_block.h"
#include "runtime/problem.h"
#include "runtime/status.h"
#include "runtime/tensor.h"

namespace attnkit {

// Appending new tokens to a preallocated KV cache, in place.
//   k_cache, v_cache : [batch, kv_heads, capacity, head_dim] in the cache's
//                      layout (strides) and storage dtype
//   new_k, new_v     : [batch, kv_heads, >= max(new_lens), head_dim], same
//                      dtype (f32 or bf16 for an i8 cache), any strides
//   k_scale, v_scale : an i8 cache's scales, [batch, kv_heads, capacity, 1]
//                      f32 (KvScaleStrides); null for f32/bf16 caches
// Sequence b's tokens t < new_lens[b] go to position positions[b] + t. Only
// those bytes are written: into an i8 cache each new row is quantized
// straight into its slot and its scale into the scale tensor (QuantizeRowI8,
// the one rule), so no dequantized or staged copy exists.
struct KvAppendArgs {
  TensorView k_cache, v_cache;
  TensorView new_k, new_v;
  std::span<const int64_t> positions;
  std::span<const int64_t> new_lens;
  TensorView k_scale, v_scale;
};

// Checks shapes, dtypes and that every sequence fits: an overflow is an
// OUT_OF_RANGE error naming the sequence, its length and the capacity. For an
// i8 cache also the scales' views and that every new value is finite (an
// int8 cannot hold an infinity or a NaN; the error names the element).
Status ValidateAppend(const KvAppendArgs& a);

// Bytes an append of `a` writes: the new tokens of K and V, every head (and
// their scales for an i8 cache).
int64_t AppendedBytes(const KvAppendArgs& a);

// The portable strided append (element by element, contiguous runs with
// memcpy). Returns the number of bytes written and reports them to
// accounting::RecordCopy (runtime/accounting.h). Preconditions: ValidateAppend.
int64_t AppendKvStrided(const KvAppendArgs& a);

// How a backend that runs in another process (backends/remote.h) lost its
// last call: the process was killed by a signal, exited (exit(0) included),
// or overran the call's deadline and was killed. In-process backends never
// report one (a crash there takes the caller with it).
enum class Fault : uint8_t { kNone = 0, kCrash, kExit, kTimeout };

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  // Ok when this backend can run `p`; otherwise UNIMPLEMENTED naming what it
  // lacks (the tester skips, never fails, an unsupported problem).
  virtual Status Supports(const AttentionProblem& p) const {
    return Status::Ok();
  }

  // out = softmax(scale * q k^T + mask) v. Implementations validate with
  // ValidateArgs (cheap) and must not allocate once warmed up for a shape.
  virtual Status Attention(const AttentionProblem& p,
                           const AttentionArgs& args) = 0;

  // Sizes this backend's workspaces for every problem no larger than
  // `largest` in any dimension (batch, heads, head_dim, q/kv lengths), so that
  // Attention on them does not allocate. Optional: a decode session calls it
  // once before its timed steps (the kv lengths grow by one each step).
  virtual Status ReserveWorkspace(const AttentionProblem& largest) {
    return Status::Ok();
  }

  // The attention block (runtime/attention_block.h): the projections of x,
  // the new tokens' K/V written into the cache slots, the attention over the
  // cache prefix, the optional output projection. A backend without one
  // answers UNIMPLEMENTED to both (the tester skips its block cases).
  virtual Status SupportsBlock(const AttentionBlockProblem& p) const {
    return Status::Unimplemented(std::string(name()) + ": no attention block");
  }
  virtual Status AttentionBlock(const AttentionBlockProblem& p,
                                const AttentionBlockArgs& args) {
    return Status::Unimplemented(std::string(name()) + ": no attention block");
  }
  // In-place KV append in this backend's way. Validates, then writes only the
  // new tokens. An override reports the bytes it wrote with
  // accounting::RecordCopy, as AppendKvStrided does.
  virtual Status AppendKv(const KvAppendArgs& a) {
    ATTNKIT_RETURN_IF_ERROR(ValidateAppend(a));
    AppendKvStrided(a);
    return Status::Ok();
  }

  // One line on what this backend did that its user should know, printed
  // after a run (the compiled backend: kernels JIT-compiled, loaded from the
  // on-disk kernel cache, served ahead of time); empty for nothing.
  virtual std::string Notes() const { return {}; }

  // True when the calls run in another process (backends/remote.h): its
  // tensors are best allocated in shared memory (shared_memory::Scope).
  virtual bool InWorkerProcess() const { return false; }

  // After a call returned an error: whether it was the backend's process
  // dying rather than the backend answering (the Status then says how, with
  // the process's last output). Cleared by the next call.
  virtual Fault LastFault() const { return Fault::kNone; }

  // Forgets state kept between calls where the backend can, so that the next
  // call behaves as the first would (a worker process is replaced by a fresh
  // one): a failure found after many calls is then replayed alone.
  virtual void Reset() {}
};

}  // namespace attnkit

#endif  // ATTNKIT_RUNTIME_BACKEND_H_
