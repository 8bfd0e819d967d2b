#include "common/model/decode_attention.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "common/model/avx2_util.h"

namespace pdserve {
namespace {

#pragma GCC push_options
#pragma GCC target("avx2,fma")

using avx2::HorizontalSum;
using avx2::Load1;
using avx2::Load8;

template <typename T>
inline float Dot(const float* q, const T* k, int64_t d) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= d; i += 8) acc = _mm256_fmadd_ps(Load8(q + i), Load8(k + i), acc);
  float s = HorizontalSum(acc);
  for (; i < d; ++i) s += q[i] * Load1(k + i);
  return s;
}

// out += p * v over d elements.
template <typename T>
inline void Axpy(float p, const T* v, float* out, int64_t d) {
  const __m256 pv = _mm256_set1_ps(p);
  int64_t i = 0;
  for (; i + 8 <= d; i += 8) _mm256_storeu_ps(out + i, _mm256_fmadd_ps(pv, Load8(v + i), _mm256_loadu_ps(out + i)));
  for (; i < d; ++i) out[i] += p * Load1(v + i);
}

template <typename T>
void Head(const float* q, const DecodeAttnRows& r, const DecodeAttnShape& s, const float* sinks, int64_t kvh,
          float* scores, float* out) {
  const int64_t H = s.n_heads, K = s.n_kv_heads, d = s.head_dim, rep = H / K, S = r.rows;
  const T* k = static_cast<const T*>(r.k);
  const T* v = static_cast<const T*>(r.v);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  const float* qh = q + kvh * rep * d;
  // Scores, each K row read once for all `rep` heads: scores[g * S + j].
  for (int64_t j = 0; j < S; ++j) {
    const T* kj = k + (j * K + kvh) * d;
    for (int64_t g = 0; g < rep; ++g) scores[g * S + j] = Dot(qh + g * d, kj, d) * scale;
  }
  // Softmax with the sink as one more logit (no value vector).
  for (int64_t g = 0; g < rep; ++g) {
    float* sc = scores + g * S;
    const float sink = sinks[kvh * rep + g];
    float m = sink;
    for (int64_t j = 0; j < S; ++j) m = std::max(m, sc[j]);
    double sum = std::exp(static_cast<double>(sink - m));
    for (int64_t j = 0; j < S; ++j) {
      sc[j] = std::exp(sc[j] - m);
      sum += sc[j];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t j = 0; j < S; ++j) sc[j] *= inv;
    std::fill(out + (kvh * rep + g) * d, out + (kvh * rep + g + 1) * d, 0.0f);
  }
  // Weighted values, each V row read once.
  for (int64_t j = 0; j < S; ++j) {
    const T* vj = v + (j * K + kvh) * d;
    for (int64_t g = 0; g < rep; ++g) Axpy(scores[g * S + j], vj, out + (kvh * rep + g) * d, d);
  }
}

#pragma GCC pop_options

}  // namespace

void DecodeAttentionHead(const float* q, const DecodeAttnRows& rows, const DecodeAttnShape& shape,
                         const float* sinks, int64_t kv_head, float* scratch, float* out) {
  if (shape.bf16) {
    Head<uint16_t>(q, rows, shape, sinks, kv_head, scratch, out);
  } else {
    Head<float>(q, rows, shape, sinks, kv_head, scratch, out);
  }
}

}  // namespace pdserve
