#include "common/engine/sorted_by_probability.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace pdserve {
namespace {

uint64_t Bits(double x) {
  uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

}  // namespace

SortedByProbability::SortedByProbability(const double* p, int64_t vocab, double max_p, double min_p,
                                         bool with_masses, ProbabilitySortScratch* scratch)
    : p_(p), ids_(scratch->ids), start_(scratch->start), keys_(scratch->keys), mass_(scratch->mass) {
  top_ = Bits(max_p);
  const uint64_t span = top_ - Bits(std::max(min_p, std::ldexp(max_p, -32)));
  while ((span >> shift_) >= static_cast<uint64_t>(kBuckets)) ++shift_;
  id_bits_ = std::min(63, 64 - shift_);
  ids_fit_ = ((vocab - 1) >> id_bits_) == 0;
  start_.assign(kBuckets + 1, 0);
  for (int64_t i = 0; i < vocab; ++i) ++start_[Bucket(i) + 1];
  for (int64_t b = 0; b < kBuckets; ++b) start_[b + 1] += start_[b];
  ids_.resize(vocab);
  mass_.assign(with_masses ? kBuckets : 0, 0.0);
  for (int64_t i = 0; i < vocab; ++i) {
    const int64_t b = Bucket(i);
    ids_[start_[b]++] = i;  // start_[b] moves to b's end
    if (with_masses) mass_[b] += p_[i];
  }
  for (int64_t b = kBuckets; b > 0; --b) start_[b] = start_[b - 1];
  start_[0] = 0;
  // A sum of n nonnegative terms, added in any order or tree, lies within
  // about n * 2^-53 of their exact sum (here ~1: the probabilities sum to
  // 1 within vocab * 2^-53). The ordered sums add at most vocab terms, those
  // through mass_ at most vocab + kBuckets; the slack is 32 times the two
  // bounds together.
  slack_ = std::ldexp(static_cast<double>(2 * vocab + kBuckets), -48);
}

int64_t SortedByProbability::At(int64_t i) {
  while (sorted_end_ <= i) {
    SortBucket(next_);
    sorted_end_ = start_[++next_];
  }
  return ids_[i];
}

std::optional<int64_t> SortedByProbability::DrawUntruncated(double u) {
  if (mass_.empty()) return std::nullopt;
  double cum = 0.0;
  for (int64_t b = 0; b < kBuckets; ++b) {
    if (cum + mass_[b] < u - slack_) {  // the ordered sum stays below u through b
      cum += mass_[b];
      continue;
    }
    SortBucket(b);
    for (int64_t j = start_[b]; j < start_[b + 1]; ++j) {
      const double before = cum;
      cum += p_[ids_[j]];
      if (cum > u) {
        // A first term is summed exactly either way; past it, the ordered
        // sum crosses u here too only if this sum is clear of u on both
        // sides by more than the slack.
        if (before == 0.0 || (cum > u + slack_ && before < u - slack_)) return ids_[j];
        return std::nullopt;
      }
    }
  }
  return std::nullopt;
}

void SortedByProbability::SortBucket(int64_t b) {
  const auto first = ids_.begin() + start_[b], last = ids_.begin() + start_[b + 1];
  if (last - first < 2) return;
  if (b == kBuckets - 1 || !ids_fit_) {
    std::sort(first, last, [this](int64_t x, int64_t y) { return p_[x] > p_[y] || (p_[x] == p_[y] && x < y); });
    return;
  }
  // Inside bucket b, top_ - bits is (b << shift_) + an offset below
  // 2^shift_: the offset above the id makes one integer key whose order is
  // probability descending, then id ascending.
  keys_.clear();
  const uint64_t base = static_cast<uint64_t>(b) << shift_;
  for (auto it = first; it != last; ++it) {
    keys_.push_back(((top_ - Bits(p_[*it]) - base) << id_bits_) | static_cast<uint64_t>(*it));
  }
  std::sort(keys_.begin(), keys_.end());
  const uint64_t id_mask = (uint64_t{1} << id_bits_) - 1;
  for (size_t j = 0; j < keys_.size(); ++j) first[static_cast<int64_t>(j)] = static_cast<int64_t>(keys_[j] & id_mask);
}

int64_t SortedByProbability::Bucket(int64_t i) const {
  const uint64_t below_top = top_ - std::min(Bits(p_[i]), top_);
  return static_cast<int64_t>(std::min<uint64_t>(below_top >> shift_, kBuckets - 1));
}

}  // namespace pdserve
