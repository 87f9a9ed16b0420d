/* The smallest correct attnkit plug-in: attention with strided f32/bf16
 * q, k, v, every mask, GQA, scalar loops and a two-pass softmax. No
 * append_kv: attnkit appends to the cache with its portable copy. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "plugin/attnkit_plugin.h"

static float Load(const attnkit_plugin_tensor* t, int64_t b, int64_t h,
                  int64_t s, int64_t e) {
  const int64_t at = b * t->strides[0] + h * t->strides[1] + s * t->strides[2] +
                     e * t->strides[3];
  if (t->dtype == ATTNKIT_PLUGIN_F32) return ((const float*)t->data)[at];
  const uint32_t bits = (uint32_t)((const uint16_t*)t->data)[at] << 16;
  float x;
  memcpy(&x, &bits, sizeof x);
  return x;
}

static void* Create(char* error, size_t cap) {
  (void)error;
  (void)cap;
  static int instance;
  return &instance;
}

static void Destroy(void* instance) { (void)instance; }

static attnkit_plugin_status Attention(void* instance,
                                       const attnkit_plugin_problem* p,
                                       const attnkit_plugin_attention_args* a,
                                       char* error, size_t cap) {
  (void)instance;
  enum { kMaxKeys = 1 << 17 };
  static float w[kMaxKeys];
  const int64_t group = p->q_heads / p->kv_heads;
  for (int64_t b = 0; b < p->batch; ++b) {
    const int64_t ql = p->q_lens[b], kl = p->kv_lens[b];
    if (kl > kMaxKeys) {
      snprintf(error, cap, "kv_lens[%lld]=%lld exceeds %d", (long long)b,
               (long long)kl, kMaxKeys);
      return ATTNKIT_PLUGIN_INVALID_ARGUMENT;
    }
    for (int64_t h = 0; h < p->q_heads; ++h) {
      const int64_t kh = h / group;
      for (int64_t i = 0; i < ql; ++i) {
        const int64_t pos = kl - ql + i; /* the query's absolute position */
        float m = -INFINITY;
        for (int64_t j = 0; j < kl; ++j) {
          int visible = 1;
          if (p->mask == ATTNKIT_PLUGIN_MASK_CAUSAL) visible = j <= pos;
          if (p->mask == ATTNKIT_PLUGIN_MASK_WINDOW) {
            visible = j <= pos && j > pos - p->window;
          }
          float s = -INFINITY;
          if (visible) {
            s = 0;
            for (int64_t e = 0; e < p->head_dim; ++e) {
              s += Load(&a->q, b, h, i, e) * Load(&a->k, b, kh, j, e);
            }
            s *= p->scale;
            if (p->mask == ATTNKIT_PLUGIN_MASK_BIAS) {
              s += Load(&a->bias, b, a->bias.shape[1] == 1 ? 0 : h, i, j);
            }
          }
          w[j] = s;
          if (s > m) m = s;
        }
        float sum = 0;
        for (int64_t j = 0; j < kl; ++j) {
          w[j] = m == -INFINITY ? 0.0f : expf(w[j] - m);
          sum += w[j];
        }
        for (int64_t e = 0; e < p->head_dim; ++e) {
          float acc = 0;
          for (int64_t j = 0; j < kl; ++j) {
            if (w[j] != 0.0f) acc += w[j] * Load(&a->v, b, kh, j, e);
          }
          float* out = (float*)a->out.data + b * a->out.strides[0] +
                       h * a->out.strides[1] + i * a->out.strides[2] +
                       e * a->out.strides[3];
          *out = sum > 0 ? acc / sum : 0.0f; /* a row that sees no key: 0 */
        }
      }
    }
  }
  return ATTNKIT_PLUGIN_OK;
}

static const attnkit_plugin_v1_table kTable = {ATTNKIT_PLUGIN_ABI_VERSION,
                                               sizeof(attnkit_plugin_v1_table),
                                               "my_kernel",
                                               Create,
                                               Destroy,
                                               NULL,
                                               Attention,
                                               NULL};

const attnkit_plugin_v1_table* attnkit_plugin_v1(void) { return &kTable; }
