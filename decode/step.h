// The one decode step. The decode session (and so the decode report and its
// gate), the differential tester's decode-loop cases and the decode_step
// benchmark all advance their KV state through a Stepper, so what the
// benchmark times, what the gate meters and what the tester checks is the
// same code with the same meter.
//
// A step, per layer: append each sequence's new tokens to its context, then
// attention of its queries over the whole context (queries align to the end
// of the context, so a causal mask lets query i see the keys up to its own
// position). Two ways to hold the context:
//
//   in place : a capacity-preallocated KvCache; the append goes through the
//              backend's AppendKv (only the new tokens are written) and
//              attention reads the cache prefix where it lies.
//   naive    : what the slow frameworks do -- per layer and sequence a
//              reference::ConcatKv allocates len + n, copies the context,
//              appends and frees the old buffer -- then attention per
//              sequence on the fresh BHSD buffers.
//
// Both run attention on the same backend, so the difference between them is
// the KV update alone.
#ifndef ATTNKIT_DECODE_STEP_H_
#define ATTNKIT_DECODE_STEP_H_

#include <cstdint>
#include <span>

#include "runtime/accounting.h"
#include "runtime/backend.h"
#include "runtime/kv_cache.h"
#include "runtime/problem.h"
#include "runtime/status.h"
#include "runtime/tensor.h"

namespace attnkit::reference {
class ConcatKv;
}

namespace attnkit::decode {

// One layer's tensors for one step.
struct LayerStep {
  TensorView q;  // [batch, q_heads, >= max q_len, head_dim], storage dtype
  // [batch, kv_heads, >= max new_len, head_dim], storage dtype, any strides.
  TensorView new_k, new_v;
  // [batch, q_heads, >= max q_len, >= context length] f32 when the mask is
  // kBias, else empty.
  TensorView bias;
  TensorView out;  // [batch, q_heads, >= max q_len, head_dim] f32
};

// What one step cost, all layers.
struct StepRecord {
  int64_t kv_len = 0;  // longest context after this step's append
  int64_t allocs = 0;
  // Of which made by the KV update (the rest: attention and bookkeeping),
  // so a backend whose Attention allocates is told apart from the cache.
  int64_t append_allocs = 0;
  int64_t bytes_allocated = 0;
  int64_t bytes_copied = 0;
  double append_us = 0;
  double attention_us = 0;
  double step_us = 0;  // the whole step (append + attention + bookkeeping)
  // Most heap bytes live during the step, counted from the start of the
  // `since` meter given to Step (from the step's own start without one).
  int64_t peak_bytes = 0;
};

class Stepper {
 public:
  // In place: `cache`'s layers are the model's layers.
  static Stepper InPlace(Backend& backend, KvCache& cache);
  // Naive: one ConcatKv per layer, each for `batch` sequences. `shape` gives
  // the heads and head_dim attention runs with (its batch must match); its
  // vectors size the per-sequence problem once, here, so a step allocates
  // only what the concatenation itself does.
  static Stepper Naive(Backend& backend, std::span<reference::ConcatKv> layers,
                       const AttentionProblem& shape);

  // One step over every layer (layers.size() must be the model's layer
  // count): sequence b appends new_lens[b] tokens, then attends with
  // problem.q_lens[b] queries. `problem` holds heads, mask, scale, dtype and
  // q_lens; its layout and kv_lens are set here (the cache's layout and the
  // lengths after the append). INVALID_ARGUMENT names a mismatched field;
  // a backend's error is returned prefixed with the layer and the phase
  // ("layer 0 append: ..."), the record then holds the step so far.
  // Allocates nothing itself once the backend's workspace is reserved.
  Status Step(AttentionProblem& problem, std::span<const LayerStep> layers,
              std::span<const int64_t> new_lens, StepRecord* record,
              const accounting::Meter* since = nullptr);

  // Context length of sequence b (every layer has the same between steps).
  int64_t length(int64_t b) const;
  int64_t batch() const { return batch_; }
  int64_t layers() const { return layers_; }

 private:
  Stepper(Backend& backend, int64_t batch, int64_t layers)
      : backend_(&backend), batch_(batch), layers_(layers) {}
  Status StepLayer(AttentionProblem& problem, int64_t layer,
                   const LayerStep& in, std::span<const int64_t> new_lens,
                   const accounting::Meter& meter, StepRecord& rec);

  Backend* backend_;
  int64_t batch_, layers_;
  KvCache* cache_ = nullptr;               // in place
  std::span<reference::ConcatKv> concat_;  // naive
  AttentionProblem one_;                   // naive: one sequence's problem
};

}  // namespace attnkit::decode

#endif  // ATTNKIT_DECODE_STEP_H_
