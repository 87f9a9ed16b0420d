// A decode loop of a model-like stack of attention layers (Llama-2-style
// decode: one new token per sequence per step, every layer appending to its
// KV context and attending over it), metered per step and run two ways on
// the same inputs so the cost of the KV update is visible side by side:
// kInPlace (a capacity-preallocated KvCache) and kNaiveConcat (the
// allocate-copy-append concatenation of the slow frameworks). The step
// itself is decode/step.h's Stepper.
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

#include "decode/step.h"
#include "runtime/accounting.h"
#include "runtime/backend.h"
#include "runtime/enum_table.h"
#include "runtime/kv_cache.h"
#include "runtime/limits.h"
#include "runtime/problem.h"
#include "runtime/status.h"
#include "runtime/tensor.h"

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
  // The cache's storage when it differs from q's: i8 (a quantized cache;
  // the steps' K/V arrive in `dtype` and the append quantizes them).
  std::optional<DType> kv_dtype;
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
  // kInPlace: check the cache after the prefill and after every step,
  // outside the step's meter (decode report): the new tokens' slots byte
  // for byte against what was appended, the slot after them still the
  // poison, and a sum of every element's bits of the whole capacity against
  // the expected one, so a write anywhere else shows. See cache_fault().
  bool audit_cache = false;

  // INVALID_ARGUMENT naming the field and value (NOT_FOUND for an unknown
  // backend is reported by DecodeSession::Create).
  Status Validate() const;
  DType KvDType() const { return kv_dtype.value_or(dtype); }
  int64_t StartLen(int64_t b) const {
    return start_lens.empty() ? start_len : start_lens[b];
  }
  int64_t MaxStartLen() const;
  // What a session of this configuration in `mode` holds at once: the KV
  // cache (in place) or the concatenated contexts and the copy of one while
  // it grows (naive), the prefill staging, the kept outputs, the step
  // inputs. Backend workspaces are not included. Doubles: valid for any
  // configuration, checked before anything is allocated.
  MemoryEstimate Memory(DecodeMode mode) const;
  // The attention problem of a session's last step in `mode` (q_len 1 over
  // the whole capacity, no mask): the whole batch in place, one sequence of
  // BHSD at a time in the naive mode. What a backend must support
  // (Backend::Supports) and what it reserves its workspaces for.
  AttentionProblem LargestProblem(DecodeMode mode) const;
  int64_t Capacity() const;
  // Bytes one step appends: K and V of one token, every layer, sequence and
  // kv head (and their scales in an i8 cache) -- what the in-place mode
  // copies per step, exactly.
  int64_t NewTokenBytes() const;
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

  // The first fault the cache audit found (config.audit_cache), naming the
  // layer, sequence, position and element; "" when none (or not audited).
  const std::string& cache_fault() const { return cache_fault_; }

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
  // The audit (config.audit_cache): sequence b's rows [begin, begin + n) of
  // layer l's cache against rows [0, n) of new_k/new_v, and the row after
  // them still the poison; the expected bit sum of the layer advanced by
  // the rows' bits. Records the first fault.
  void AuditRows(int64_t l, int64_t b, int64_t begin, int64_t n,
                 const TensorView& new_k, const TensorView& new_v);
  // The layer's whole-capacity bit sum against the expected one.
  void AuditSum(int64_t l, const char* when);

  DecodeConfig config_;
  DecodeMode mode_;
  // Alive for the whole session: peak heap bytes are counted from Create.
  std::unique_ptr<accounting::Meter> session_meter_;
  int64_t held_bytes_ = 0;  // live heap bytes after Create
  std::unique_ptr<Backend> backend_;
  std::optional<KvCache> cache_;
  std::vector<reference::ConcatKv> naive_;  // per layer
  std::optional<Stepper> stepper_;
  std::vector<Tensor> q_, new_k_, new_v_;  // per layer
  std::vector<LayerStep> layer_steps_;     // per layer, refilled each step
  Tensor outputs_;  // [steps * layers * batch, q_heads, 1, head_dim] f32
  AttentionProblem problem_;  // reused every step: no allocation
  std::vector<int64_t> one_token_;
  std::vector<StepRecord> records_;
  std::vector<uint64_t> expected_sum_;  // per layer (audit_cache)
  Tensor audit_row_;  // [1, 1, 1, head_dim] i8: a new row as quantized
  std::string cache_fault_;
};

}  // namespace attnkit::decode

#endif  // ATTNKIT_DECODE_SESSION_H_
