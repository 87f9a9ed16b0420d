// A decode loop of a model-like stack of attention layers, metered per step:
// the workload behind ../shared/seeds/002 (Llama-2 decode), run two ways on
// the same inputs so the cost of the KV update is visible side by side:
//
//   kInPlace     : a capacity-preallocated KvCache; each step's K/V are
//                  written with the backend's AppendKv and attention reads the
//                  cache prefix where it lies.
//   kNaiveConcat : what the slow frameworks do -- per layer and sequence,
//                  allocate len+1, copy the whole context, append, free the
//                  old buffer (reference::ConcatKv) -- then attention on the
//                  fresh buffers (BHSD whatever the configured layout).
//
// Both modes run attention on the same backend, so the difference between
// their rows is the KV update alone.
//
// A session prefills each sequence's start context once (not metered), then
// every Step() does, per layer: append this step's K/V (seeded random, one
// token per sequence), then attention of the new query (q_len 1) over the
// whole context. Inputs, outputs and backend workspaces are sized at Create,
// so a step of the in-place mode on a well-behaved backend allocates nothing.
#ifndef ATTNKIT_DECODE_SESSION_H_
#define ATTNKIT_DECODE_SESSION_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/accounting.h"
#include "runtime/backend.h"
#include "runtime/enum_table.h"
#include "runtime/kv_cache.h"
#include "runtime/problem.h"
#include "runtime/status.h"
#include "runtime/tensor.h"

namespace attnkit::reference {
class ConcatKv;
}

namespace attnkit::decode {

enum class DecodeMode : uint8_t { kNaiveConcat = 0, kInPlace };
inline constexpr auto kDecodeModeNames = MakeEnumTable<DecodeMode>({
    {DecodeMode::kNaiveConcat, "naive_concat"},
    {DecodeMode::kInPlace, "in_place"},
});
static_assert(kDecodeModeNames.RoundTrips());
inline std::string_view DecodeModeName(DecodeMode m) {
  return kDecodeModeNames.Name(m);
}
inline std::optional<DecodeMode> ParseDecodeMode(std::string_view s) {
  return kDecodeModeNames.Parse(s);
}

struct DecodeConfig {
  int64_t layers = 1;
  int64_t batch = 1;
  int64_t q_heads = 1;
  int64_t kv_heads = 1;  // divides q_heads (GQA/MQA)
  int64_t head_dim = 64;
  DType dtype = DType::kF32;
  KvLayout layout = KvLayout::kBHSD;
  // Context already in the cache before the first step: start_len for every
  // sequence, or per sequence (ragged) when start_lens is non-empty.
  int64_t start_len = 0;
  std::vector<int64_t> start_lens;
  int64_t steps = 1;     // decode steps the session will run
  int64_t capacity = 0;  // KV capacity per sequence; 0 = longest start + steps
  std::string backend = "reference";  // a registered backend name
  // When set, builds the backend instead of the registry (a plug-in loaded
  // from a shared library, say); `backend` is then only its name.
  std::function<StatusOr<std::unique_ptr<Backend>>()> make_backend;
  uint64_t seed = 1;

  // INVALID_ARGUMENT naming the field and value (NOT_FOUND for an unknown
  // backend is reported by DecodeSession::Create).
  Status Validate() const;
  int64_t StartLen(int64_t b) const {
    return start_lens.empty() ? start_len : start_lens[b];
  }
  int64_t MaxStartLen() const;
  int64_t Capacity() const;
  // Bytes one step appends: K and V of one token, every layer, sequence and
  // kv head -- what the in-place mode copies per step, exactly.
  int64_t NewTokenBytes() const;
};

// One step, all layers.
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
  // Most heap bytes the session held during this step (cache, inputs,
  // workspaces and any transient buffers), counted from its creation.
  int64_t peak_bytes = 0;
};

class DecodeSession {
 public:
  static StatusOr<std::unique_ptr<DecodeSession>> Create(
      const DecodeConfig& config, DecodeMode mode);
  ~DecodeSession();

  const DecodeConfig& config() const { return config_; }
  DecodeMode mode() const { return mode_; }

  // One decode step; FAILED_PRECONDITION after config.steps steps.
  Status Step();
  // Every remaining step.
  Status Run();

  int64_t steps_done() const { return static_cast<int64_t>(records_.size()); }
  std::span<const StepRecord> records() const { return records_; }
  // Most heap bytes the session held at once: what it holds after Create
  // (cache or concatenated contexts, inputs, outputs, backend workspaces)
  // and, during each step, that plus the step's transient buffers. The
  // prefill's staging buffer is not counted. -1 without allocation hooks.
  int64_t peak_bytes() const;
  // Context length of sequence b (same in every layer between steps).
  int64_t length(int64_t b) const;

  // Step s's query and output of `layer`: [batch, q_heads, 1, head_dim]
  // (query in the storage dtype, output f32). Outputs of every step are kept;
  // queries only for the last step.
  TensorView query(int64_t layer) const;
  TensorView output(int64_t step, int64_t layer) const;

  // The in-place cache (null in kNaiveConcat mode).
  const KvCache* cache() const { return cache_ ? &*cache_ : nullptr; }
  // The naive mode's K/V of sequence b ([1, kv_heads, len, head_dim], BHSD);
  // empty views in kInPlace mode.
  KvCache::View naive_sequence(int64_t layer, int64_t b) const;

 private:
  DecodeSession(const DecodeConfig& config, DecodeMode mode);
  Status Init();
  Status Prefill();
  void FillStepInputs(int64_t step);

  DecodeConfig config_;
  DecodeMode mode_;
  // Alive for the whole session: peak heap bytes are counted from Create.
  std::unique_ptr<accounting::Meter> session_meter_;
  int64_t held_bytes_ = 0;  // live heap bytes after Create
  std::unique_ptr<Backend> backend_;
  std::optional<KvCache> cache_;
  std::vector<std::unique_ptr<reference::ConcatKv>> naive_;  // per layer
  std::vector<Tensor> q_, new_k_, new_v_;                    // per layer
  Tensor outputs_;  // [steps * layers * batch, q_heads, 1, head_dim] f32
  AttentionProblem problem_;  // reused every call: no allocation
  std::vector<int64_t> one_token_;
  std::vector<StepRecord> records_;
};

}  // namespace attnkit::decode

#endif  // ATTNKIT_DECODE_SESSION_H_
