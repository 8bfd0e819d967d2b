#include "common/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
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

namespace {

// Per-thread buffers: a 128k vocabulary needs ~2 MB a call.
struct SamplerScratch {
  std::vector<double> p;
  std::vector<int64_t> ids, start;
  std::vector<uint64_t> keys;
};

// The ids in the order the spec samples from (probability descending, ties
// to the lower id), sorted only as far as a walk reads them. A counting sort
// on each probability's double bits (monotone in the value for p >= 0)
// puts every id in one of kBuckets buckets, in probability order and ids
// ascending inside each; a bucket is sorted the first time the walk reaches
// it. The buckets split the bits between the largest probability and the
// smallest one not below 2^-32 of it into equal power-of-two widths (about
// equal widths in log p, however narrow the distribution); anything smaller
// shares the last bucket.
//
// The partial sorts of the whole vocabulary this replaced cost 3.3-33 ms a
// token at 128k ids with temperature 1 or top_p 0.9 (a flat distribution
// walks far into the order); this costs a few linear passes plus the
// buckets the walk reaches: 1.2-4.5 ms (docs/benchmarks.md §5).
class SortedByProbability {
 public:
  static constexpr int64_t kBuckets = 4096;

  SortedByProbability(const double* p, int64_t vocab, double max_p, double min_p, SamplerScratch* scratch)
      : p_(p), ids_(scratch->ids), start_(scratch->start), keys_(scratch->keys) {
    top_ = Bits(max_p);
    const uint64_t span = top_ - Bits(std::max(min_p, std::ldexp(max_p, -32)));
    while ((span >> shift_) >= static_cast<uint64_t>(kBuckets)) ++shift_;
    id_bits_ = std::min(63, 64 - shift_);
    ids_fit_ = ((vocab - 1) >> id_bits_) == 0;
    start_.assign(kBuckets + 1, 0);
    for (int64_t i = 0; i < vocab; ++i) ++start_[Bucket(i) + 1];
    for (int64_t b = 0; b < kBuckets; ++b) start_[b + 1] += start_[b];
    ids_.resize(vocab);
    for (int64_t i = 0; i < vocab; ++i) ids_[start_[Bucket(i)]++] = i;  // start_[b] moves to b's end
    for (int64_t b = kBuckets; b > 0; --b) start_[b] = start_[b - 1];
    start_[0] = 0;
  }

  // The id at position i of the order, i < vocab.
  int64_t At(int64_t i) {
    while (sorted_end_ <= i) {
      SortBucket(next_);
      sorted_end_ = start_[++next_];
    }
    return ids_[i];
  }

 private:
  static uint64_t Bits(double x) {
    uint64_t b;
    std::memcpy(&b, &x, sizeof b);
    return b;
  }
  void SortBucket(int64_t b) {
    const auto first = ids_.begin() + start_[b], last = ids_.begin() + start_[b + 1];
    if (last - first < 2) return;
    if (b == kBuckets - 1 || !ids_fit_) {
      std::sort(first, last, [this](int64_t x, int64_t y) { return p_[x] > p_[y] || (p_[x] == p_[y] && x < y); });
      return;
    }
    // Inside bucket b, top_ - bits is (b << shift_) + an offset below
    // 2^shift_: the offset above the id makes one integer key whose order
    // is probability descending, then id ascending.
    keys_.clear();
    const uint64_t base = static_cast<uint64_t>(b) << shift_;
    for (auto it = first; it != last; ++it) {
      keys_.push_back(((top_ - Bits(p_[*it]) - base) << id_bits_) | static_cast<uint64_t>(*it));
    }
    std::sort(keys_.begin(), keys_.end());
    const uint64_t id_mask = (uint64_t{1} << id_bits_) - 1;
    for (size_t j = 0; j < keys_.size(); ++j) first[static_cast<int64_t>(j)] = static_cast<int64_t>(keys_[j] & id_mask);
  }

  // Non-decreasing as p_[i] falls; equal probabilities share a bucket.
  int64_t Bucket(int64_t i) const {
    const uint64_t below_top = top_ - std::min(Bits(p_[i]), top_);
    return static_cast<int64_t>(std::min<uint64_t>(below_top >> shift_, kBuckets - 1));
  }

  const double* p_;
  std::vector<int64_t>& ids_;
  std::vector<int64_t>& start_;  // bucket b holds ids_[start_[b], start_[b + 1])
  std::vector<uint64_t>& keys_;
  uint64_t top_ = 0;
  int shift_ = 0;    // a bucket is 2^shift_ values of the bits wide
  int id_bits_ = 0;  // the low bits of a sort key that hold the id
  bool ids_fit_ = false;
  int64_t next_ = 0;        // the first bucket not sorted yet
  int64_t sorted_end_ = 0;  // ids_[0, sorted_end_) are in their final order
};


}  // namespace

int64_t SampleToken(const float* logits, int64_t vocab, const SamplingParams& params, uint64_t n) {
  if (params.temperature <= 0.0f) return Argmax(logits, vocab);
  thread_local SamplerScratch scratch;

  // softmax(logits / temperature) in double.
  const double t = params.temperature;
  std::vector<double>& p = scratch.p;
  p.resize(vocab);
  double max_l = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i) max_l = std::max(max_l, p[i] = static_cast<double>(logits[i]) / t);
  double z = 0.0;
  for (int64_t i = 0; i < vocab; ++i) {
    p[i] = std::exp(p[i] - max_l);
    z += p[i];
  }
  // Non-finite logits (a NaN, or +inf) leave no distribution to draw from:
  // take the argmax, as greedy does.
  if (!std::isfinite(z)) return Argmax(logits, vocab);
  double max_p = 0.0, min_p = 1.0;
  for (double& x : p) {
    x /= z;
    max_p = std::max(max_p, x);
    min_p = std::min(min_p, x);
  }

  // Candidates sorted by probability, descending, ties to the lower id. Only
  // a prefix is ever read, so the order is built as far as it is read.
  SortedByProbability order(p.data(), vocab, max_p, min_p, &scratch);
  const int64_t k = (params.top_k > 0 && params.top_k < vocab) ? params.top_k : vocab;

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
  if (params.top_p > 0.0f && params.top_p < 1.0f) {
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
  const double u = CounterUniform(params.seed, n);
  double cum = 0.0;
  for (int64_t i = 0; i < m; ++i) {
    cum += p[order.At(i)] / kept_mass / mass;
    if (cum > u) return order.At(i);
  }
  return order.At(m - 1);  // rounding left u above the total
}

}  // namespace pdserve
