#include "common/engine/sampler.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "common/engine/softmax.h"
#include "common/engine/sorted_by_probability.h"

namespace pdserve {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

double CounterUniform(uint64_t seed, uint64_t n) {
  return static_cast<double>(SplitMix64(seed ^ SplitMix64(n)) >> 11) * 0x1.0p-53;
}

int64_t Argmax(const float* logits, int64_t vocab) {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab; ++i) {
    if (logits[i] > logits[best]) best = i;  // strict: ties stay on the lower id
  }
  return best;
}

int64_t SampleToken(const float* logits, int64_t vocab, const SamplingParams& params, uint64_t n) {
  if (params.temperature <= 0.0f) return Argmax(logits, vocab);
  thread_local std::vector<double> p;  // per thread: a 128k vocabulary needs ~1 MB a call
  thread_local ProbabilitySortScratch scratch;

  // softmax(logits / temperature) in double. Non-finite logits (a NaN, or
  // +inf) leave no distribution to draw from: take the argmax, as greedy
  // does.
  p.resize(vocab);
  SoftmaxExtremes extremes;
  if (!SoftmaxDouble(logits, vocab, params.temperature, p.data(), &extremes)) return Argmax(logits, vocab);
  const double max_p = extremes.max_p, min_p = extremes.min_p;

  // Candidates sorted by probability, descending, ties to the lower id. Only
  // a prefix is ever read, so the order is built as far as it is read.
  const int64_t k = (params.top_k > 0 && params.top_k < vocab) ? params.top_k : vocab;
  const bool nucleus = params.top_p > 0.0f && params.top_p < 1.0f;
  SortedByProbability order(p.data(), vocab, max_p, min_p, /*with_masses=*/k == vocab, &scratch);

  // Without top_k the draw needs the order only where its sums cross top_p
  // and u, unless one lies within rounding of a crossing.
  const double u = CounterUniform(params.seed, n);
  if (k == vocab) {
    const std::optional<int64_t> id = nucleus ? order.DrawNucleus(params.top_p, u) : order.DrawUntruncated(u);
    if (id) return *id;
  }

  // Top-k renormalisation.
  double kept_mass = 1.0;
  if (k < vocab) {
    kept_mass = 0.0;
    for (int64_t i = 0; i < k; ++i) kept_mass += p[order.At(i)];
  }

  // Nucleus: the shortest sorted prefix whose mass reaches top_p, then
  // renormalise over it.
  int64_t m = k;
  double mass = 1.0;
  if (nucleus) {
    double cum = 0.0;
    for (int64_t i = 0; i < k; ++i) {
      cum += p[order.At(i)] / kept_mass;
      if (cum >= params.top_p) {
        m = i + 1;
        break;
      }
    }
    mass = cum;
  }

  // Inverse CDF over the sorted candidates: the first whose cumulative
  // probability exceeds u.
  double cum = 0.0;
  for (int64_t i = 0; i < m; ++i) {
    cum += p[order.At(i)] / kept_mass / mass;
    if (cum > u) return order.At(i);
  }
  return order.At(m - 1);  // rounding left u above the total
}

}  // namespace pdserve
