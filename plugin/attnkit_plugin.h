/* attnkit plug-in ABI, version 1: how a user's shared library exposes an
 * attention kernel to `./attnkit check --plugin lib.so`, which then runs the
 * same differential campaign against it as against the built-in backends.
 *
 * Plain C (C99) so any language with a C FFI can implement it. A plug-in
 * exports one function,
 *
 *     const attnkit_plugin_v1_table* attnkit_plugin_v1(void);
 *
 * returning a table that lives until the library is unloaded. The loader
 * checks table->abi_version == ATTNKIT_PLUGIN_ABI_VERSION and
 * table->struct_size >= ATTNKIT_PLUGIN_V1_BASE_SIZE (the table as first
 * published, through `attention`) before using it. A plug-in sets
 * struct_size = sizeof(attnkit_plugin_v1_table) of the header it was built
 * with. A future incompatible ABI exports attnkit_plugin_v2 (a library may
 * export both); compatible additions append fields and grow struct_size, and
 * the loader reads an appended field only when struct_size covers it: a
 * library built against an older header keeps working, its missing fields
 * taken as NULL. Fields added so far: append_kv (after attention).
 *
 * Semantics are attnkit's (runtime/problem.h): logical shapes are
 * [batch, heads, seq, dim]; layouts are strides, in elements; query i of
 * sequence b sits at position kv_lens[b] - q_lens[b] + i; causal sees keys
 * j <= pos, window W sees pos - W < j <= pos, bias adds bias[b, h|0, i, j]
 * (-inf hides a key); query head h reads kv head h / (q_heads / kv_heads);
 * q, k, v are in `dtype`, bias and out are f32, math is f32; a row that
 * sees no key outputs zeros; only out rows i < q_lens[b] may be written.
 *
 * Ownership: every pointer the harness passes (problem, lengths,
 * positions, tensors, the error buffer) is owned by the harness and valid
 * only during the call; a plug-in must not keep it. The table, its `name` and
 * the instance from create() are owned by the plug-in; the harness calls
 * destroy() once per instance and never frees anything of the plug-in's.
 *
 * Errors: every call returns an attnkit_plugin_status. On anything but
 * ATTNKIT_PLUGIN_OK the plug-in writes a NUL-terminated message (truncated
 * to error_capacity bytes including the NUL) into `error`, naming the field
 * and value it rejects, e.g. "head_dim=300 exceeds 256". The harness shows
 * it with bytes outside printable ASCII escaped (\xNN), and reads at most
 * error_capacity bytes even when no NUL is among them. UNSUPPORTED from
 * supports() makes the harness skip the problem (never a failure); any error
 * from attention() or append_kv() on a problem that supports() accepted is a
 * failure. Plug-ins must not throw across the ABI, print, or exit.
 *
 * Threads: one instance is called from one thread at a time; a plug-in may
 * use threads inside a call.
 *
 * KV cache: decode-loop cases append each step's new tokens to a
 * preallocated, capacity-sized cache with the plug-in's append_kv (when the
 * table has it) or else with attnkit's portable in-place append, check that
 * the whole cache then equals the naive concatenation bit for bit (nothing
 * but the new tokens' positions changed), and call attention() on the cache
 * prefix (capacity-sized k/v views).
 */
#ifndef ATTNKIT_RUNTIME_ATTNKIT_PLUGIN_H_
#define ATTNKIT_RUNTIME_ATTNKIT_PLUGIN_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ATTNKIT_PLUGIN_ABI_VERSION 1
#define ATTNKIT_PLUGIN_ENTRY_V1 "attnkit_plugin_v1"

typedef enum attnkit_plugin_status {
  ATTNKIT_PLUGIN_OK = 0,
  ATTNKIT_PLUGIN_UNSUPPORTED = 1,      /* supports(): skip this problem */
  ATTNKIT_PLUGIN_INVALID_ARGUMENT = 2, /* the input breaks the contract */
  ATTNKIT_PLUGIN_INTERNAL = 3          /* anything else (out of memory...) */
} attnkit_plugin_status;

/* Values of the enum fields below equal attnkit's C++ enums. */
typedef enum attnkit_plugin_dtype {
  ATTNKIT_PLUGIN_F32 = 0,
  ATTNKIT_PLUGIN_BF16 = 1 /* uint16_t: the top 16 bits of an IEEE f32 */
} attnkit_plugin_dtype;

typedef enum attnkit_plugin_mask {
  ATTNKIT_PLUGIN_MASK_NONE = 0,
  ATTNKIT_PLUGIN_MASK_CAUSAL = 1,
  ATTNKIT_PLUGIN_MASK_WINDOW = 2,
  ATTNKIT_PLUGIN_MASK_BIAS = 3
} attnkit_plugin_mask;

typedef enum attnkit_plugin_layout {
  ATTNKIT_PLUGIN_LAYOUT_BHSD = 0,
  ATTNKIT_PLUGIN_LAYOUT_BSHD = 1,
  ATTNKIT_PLUGIN_LAYOUT_TRANSPOSED_V = 2
} attnkit_plugin_layout;

/* The problem, struct-of-arrays: per-sequence lengths are two arrays of
 * `batch` entries. */
typedef struct attnkit_plugin_problem {
  int64_t batch;
  int64_t q_heads;
  int64_t kv_heads; /* divides q_heads */
  int64_t head_dim;
  const int64_t* q_lens;  /* [batch] */
  const int64_t* kv_lens; /* [batch] */
  int32_t mask;           /* attnkit_plugin_mask */
  int32_t dtype;          /* attnkit_plugin_dtype of q, k, v */
  int32_t layout;         /* attnkit_plugin_layout of k, v */
  int32_t reserved;       /* 0 */
  int64_t window;         /* mask == WINDOW only, else 0 */
  float scale;            /* already resolved: 1/sqrt(head_dim) by default */
} attnkit_plugin_problem;

/* A rank-4 strided view; extents may exceed the lengths (a cache prefix). */
typedef struct attnkit_plugin_tensor {
  void* data;
  int32_t dtype; /* attnkit_plugin_dtype */
  int32_t reserved;
  int64_t shape[4];
  int64_t strides[4]; /* in elements */
} attnkit_plugin_tensor;

typedef struct attnkit_plugin_attention_args {
  attnkit_plugin_tensor q;    /* [batch, q_heads, >= max q_len, head_dim] */
  attnkit_plugin_tensor k;    /* [batch, kv_heads, >= max kv_len, head_dim] */
  attnkit_plugin_tensor v;    /* same as k; strides per layout */
  attnkit_plugin_tensor bias; /* mask == BIAS: [batch, q_heads|1, .., ..] */
  attnkit_plugin_tensor out;  /* f32, shape of q */
} attnkit_plugin_attention_args;

/* One KV-cache append: sequence b's tokens t < new_lens[b] of new_k/new_v
 * go to position positions[b] + t of k_cache/v_cache, every kv head, every
 * element of head_dim. The caches' layout is in their strides (BHSD, BSHD,
 * or transposed V: v_cache.strides[2] == 1); a kernel specialised to one
 * layout declines the others in supports(), which sees problem->layout.
 * Before the call the harness has checked that all four tensors have one
 * dtype, that batch, kv_heads and head_dim agree, that new_lens[b] <=
 * new_k.shape[2], and that positions[b] + new_lens[b] <= capacity. */
typedef struct attnkit_plugin_kv_append_args {
  attnkit_plugin_tensor k_cache; /* [batch, kv_heads, capacity, head_dim] */
  attnkit_plugin_tensor v_cache; /* same shape; strides per layout */
  attnkit_plugin_tensor new_k;   /* [batch, kv_heads, >= max new_len, dim] */
  attnkit_plugin_tensor new_v;   /* same shape as new_k; any strides */
  const int64_t* positions;      /* [batch]: the sequence's current length */
  const int64_t* new_lens;       /* [batch]: tokens to append, may be 0 */
} attnkit_plugin_kv_append_args;

typedef struct attnkit_plugin_v1_table {
  uint32_t abi_version; /* ATTNKIT_PLUGIN_ABI_VERSION */
  uint32_t struct_size; /* sizeof(attnkit_plugin_v1_table) */
  const char* name;     /* shown in reports; [a-z0-9_]+ */

  /* A new instance, or NULL (message in `error`). */
  void* (*create)(char* error, size_t error_capacity);
  void (*destroy)(void* instance);

  /* OK when the plug-in can run `problem`, else UNSUPPORTED (or
   * INVALID_ARGUMENT) with the reason. May be NULL: everything supported. */
  attnkit_plugin_status (*supports)(void* instance,
                                    const attnkit_plugin_problem* problem,
                                    char* error, size_t error_capacity);

  /* out = softmax(scale * q k^T + mask) v, for rows i < q_lens[b]. */
  attnkit_plugin_status (*attention)(void* instance,
                                     const attnkit_plugin_problem* problem,
                                     const attnkit_plugin_attention_args* args,
                                     char* error, size_t error_capacity);

  /* --- appended after the first v1 (read only when struct_size covers it) */

  /* The plug-in's own in-place KV append (e.g. fused into a transposed-V or
   * quantization-friendly layout). May be NULL: the harness appends with its
   * portable strided copy. It writes the new tokens' positions of k_cache
   * and v_cache -- [positions[b], positions[b] + new_lens[b]) of every kv
   * head, every element of head_dim, bit-exact copies of new_k/new_v -- and
   * nothing else: not the positions before or after them (not even zeros),
   * not other sequences, no byte outside the views' elements, not new_k or
   * new_v (which it only reads; their rows past new_lens[b] are padding
   * whose values mean nothing). The harness fills the cache's unused positions
   * and that padding with nonzero patterns and, after every append, compares
   * every byte of the capacity-sized caches; it counts the new tokens'
   * bytes as the append's copy. Any error (message naming the field and
   * value, e.g. "k_cache.strides[3]=2 is not 1") fails the case: a problem
   * the hook cannot append is declined in supports(). */
  attnkit_plugin_status (*append_kv)(void* instance,
                                     const attnkit_plugin_kv_append_args* args,
                                     char* error, size_t error_capacity);
} attnkit_plugin_v1_table;

/* The smallest struct_size the loader accepts: the table through
 * `attention`, as v1 was first published (with no append_kv). */
#define ATTNKIT_PLUGIN_V1_BASE_SIZE offsetof(attnkit_plugin_v1_table, append_kv)

/* The one symbol a plug-in exports. */
typedef const attnkit_plugin_v1_table* (*attnkit_plugin_v1_fn)(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ATTNKIT_RUNTIME_ATTNKIT_PLUGIN_H_ */
