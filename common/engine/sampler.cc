#include "common/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

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

  // softmax(logits / temperature) in double.
  const double t = params.temperature;
  double max_l = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i) max_l = std::max(max_l, static_cast<double>(logits[i]) / t);
  std::vector<double> p(vocab);
  double z = 0.0;
  for (int64_t i = 0; i < vocab; ++i) {
    p[i] = std::exp(static_cast<double>(logits[i]) / t - max_l);
    z += p[i];
  }
  for (double& x : p) x /= z;

  // Candidates sorted by probability, descending, ties to the lower id. Only
  // a prefix is ever read, so sort a growing prefix instead of the vocab.
  auto before = [&p](int64_t a, int64_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); };
  std::vector<int64_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  const int64_t k = (params.top_k > 0 && params.top_k < vocab) ? params.top_k : vocab;
  int64_t sorted = 0;
  auto sorted_upto = [&](int64_t i) {  // makes order[0..i] sorted; false past k
    if (i >= k) return false;
    if (i >= sorted) {
      const int64_t upto = std::min(k, std::max(i + 1, 4 * sorted + 256));
      std::partial_sort(order.begin() + sorted, order.begin() + upto, order.end(), before);
      sorted = upto;
    }
    return true;
  };

  // Top-k renormalisation.
  double kept_mass = 1.0;
  if (k < vocab) {
    sorted_upto(k - 1);
    kept_mass = 0.0;
    for (int64_t i = 0; i < k; ++i) kept_mass += p[order[i]];
  }

  // Nucleus: the shortest sorted prefix whose mass reaches top_p, then
  // renormalise over it.
  int64_t m = k;
  double mass = 1.0;
  if (params.top_p > 0.0f && params.top_p < 1.0f) {
    double cum = 0.0;
    for (int64_t i = 0; sorted_upto(i); ++i) {
      cum += p[order[i]] / kept_mass;
      if (cum >= params.top_p) {
        m = i + 1;
        break;
      }
    }
    mass = cum;
  }

  // Inverse CDF over the sorted candidates: the first whose cumulative
  // probability exceeds u.
  const double u = CounterUniform(params.seed, n);
  double cum = 0.0;
  for (int64_t i = 0; i < m && sorted_upto(i); ++i) {
    cum += p[order[i]] / kept_mass / mass;
    if (cum > u) return order[i];
  }
  sorted_upto(m - 1);
  return order[m - 1];  // rounding left u above the total
}

}  // namespace pdserve
