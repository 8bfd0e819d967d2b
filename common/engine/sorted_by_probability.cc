#include "common/engine/sorted_by_probability.h"

#include <algorithm>
#include <cmath>

#include "absl/base/casts.h"

namespace pdserve {
namespace {

uint64_t Bits(double x) { return absl::bit_cast<uint64_t>(x); }

}  // namespace

SortedByProbability::SortedByProbability(const double* p, int64_t vocab, double max_p, double min_p,
                                         bool with_masses, ProbabilitySortScratch* scratch)
    : p_(p),
      vocab_(vocab),
      ids_(scratch->ids),
      start_(scratch->start),
      fill_(scratch->fill),
      bucket_(scratch->bucket),
      state_(scratch->state),
      wanted_(scratch->wanted),
      keys_(scratch->keys),
      with_masses_(with_masses) {
  top_ = Bits(max_p);
  const uint64_t span = top_ - Bits(std::max(min_p, std::ldexp(max_p, -32)));
  while ((span >> shift_) >= static_cast<uint64_t>(kBuckets)) ++shift_;
  id_bits_ = std::min(63, 64 - shift_);
  ids_fit_ = ((vocab - 1) >> id_bits_) == 0;
  start_.assign(kBuckets + 1, 0);
  bucket_.resize(vocab);
  Count(with_masses);
  for (int64_t b = 0; b < kBuckets; ++b) start_[b + 1] += start_[b];
  ids_.resize(vocab);
  fill_.resize(kBuckets);
  state_.assign(kBuckets, 0);
  wanted_.assign(kBuckets, 0);
  // A sum of n nonnegative terms, added in any order or tree, lies within
  // about n * 2^-53 of their exact sum (here ~1: the probabilities sum to
  // 1 within vocab * 2^-53). The ordered sums add at most vocab terms, those
  // through the group and bucket masses at most vocab + 2 * kGroups; the
  // slack is 32 times the two bounds together (with room to spare).
  slack_ = std::ldexp(static_cast<double>(2 * vocab + kBuckets), -48);
}

void SortedByProbability::Count(bool with_masses) {
  // Four ids a step, so that a run of ids in one bucket (most of a peaked
  // row falls in the last) adds to its count once a step, and each of the
  // four mass sums of a group is one chain of additions a step: a counter
  // or a sum that every id updated would wait on its last store each time.
  double mass[4][kGroups] = {};
  int64_t i = 0;
  for (; i + 4 <= vocab_; i += 4) {
    int64_t b[4];
    for (int j = 0; j < 4; ++j) bucket_[i + j] = static_cast<uint16_t>(b[j] = Bucket(i + j));
    if (b[0] == b[3] && b[1] == b[3] && b[2] == b[3]) {
      start_[b[0] + 1] += 4;
    } else {
      for (int j = 0; j < 4; ++j) ++start_[b[j] + 1];
    }
    if (with_masses) {
      for (int j = 0; j < 4; ++j) mass[j][b[j] / kGroupBuckets] += p_[i + j];
    }
  }
  for (; i < vocab_; ++i) {
    const int64_t b = Bucket(i);
    bucket_[i] = static_cast<uint16_t>(b);
    ++start_[b + 1];
    if (with_masses) mass[i % 4][b / kGroupBuckets] += p_[i];
  }
  for (int64_t g = 0; g < kGroups; ++g) group_mass_[g] = (mass[0][g] + mass[1][g]) + (mass[2][g] + mass[3][g]);
}

int64_t SortedByProbability::At(int64_t i) {
  while (sorted_end_ <= i) {
    if ((state_[next_] & kPlaced) == 0) {
      // Place the buckets up to twice as far into the order as i (at least
      // 4,096 positions): a reader walking far pays one pass over the ids
      // each time its reach doubles.
      const int64_t reach = std::min(vocab_, std::max(2 * (i + 1), i + 4096));
      int64_t hi = next_;
      while (hi + 1 < kBuckets && start_[hi + 1] < reach) ++hi;
      Place(next_, hi);
    }
    SortBucket(next_);
    sorted_end_ = start_[++next_];
  }
  return ids_[i];
}

std::optional<int64_t> SortedByProbability::DrawUntruncated(double u) {
  const std::optional<Crossing> c = Cross(u, slack_, /*reaches=*/false, /*exact_first=*/true);
  if (!c || !c->before_clear || !c->after_clear) return std::nullopt;
  return ids_[c->pos];
}

std::optional<int64_t> SortedByProbability::DrawNucleus(double top_p, double u) {
  const std::optional<Crossing> m = Cross(top_p, slack_, /*reaches=*/true, /*exact_first=*/true);
  if (!m || !m->before_clear || !m->after_clear) return std::nullopt;
  // One id kept: renormalised it has probability p / p = 1 > u.
  if (m->pos == 0) return ids_[0];
  // The draw takes the first kept id whose terms p / mass, summed in order,
  // exceed u: where the sum of p passes u * mass. The sums here and the mass
  // are each within the slack of the ordered ones, so a crossing clear by
  // three slacks is the same crossing (docs/model.md's order, term by term).
  const std::optional<Crossing> d = Cross(u * m->sum, 3.0 * slack_, /*reaches=*/false, /*exact_first=*/false);
  if (!d || !d->before_clear) return std::nullopt;
  if (d->pos < m->pos) return d->after_clear ? std::optional<int64_t>(ids_[d->pos]) : std::nullopt;
  // The sum stays below u through the id before the last kept one: the
  // walk ends on the last kept id, crossing there or not (rounding).
  return ids_[m->pos];
}

std::optional<SortedByProbability::Crossing> SortedByProbability::Cross(double target, double margin, bool reaches,
                                                                         bool exact_first) {
  if (!with_masses_) return std::nullopt;
  double cum = 0.0;
  for (int64_t g = 0; g < kGroups; ++g) {
    if (cum + group_mass_[g] < target - margin) {  // the ordered sum stays below target through g
      cum += group_mass_[g];
      continue;
    }
    const int64_t lo = g * kGroupBuckets, hi = lo + kGroupBuckets - 1;
    Place(lo, hi);
    for (int64_t b = lo; b <= hi; ++b) {
      double mass = 0.0;
      for (int64_t j = start_[b]; j < start_[b + 1]; ++j) mass += p_[ids_[j]];
      if (cum + mass < target - margin) {
        cum += mass;
        continue;
      }
      SortBucket(b);
      for (int64_t j = start_[b]; j < start_[b + 1]; ++j) {
        const double before = cum;
        cum += p_[ids_[j]];
        if (reaches ? cum >= target : cum > target) {
          // Nothing comes before a first term, and it is summed exactly;
          // past it, the ordered sum crosses here too only if this sum is
          // clear of target on both sides by more than the margin.
          const bool first = before == 0.0;
          return Crossing{j, cum, first || before < target - margin, (exact_first && first) || cum > target + margin};
        }
      }
    }
  }
  return std::nullopt;
}

void SortedByProbability::Place(int64_t lo, int64_t hi) {
  int64_t left = 0;  // ids still to place
  for (int64_t b = lo; b <= hi; ++b) {
    if ((state_[b] & kPlaced) != 0) continue;
    state_[b] |= kPlaced;
    wanted_[b] = 1;
    fill_[b] = start_[b];
    left += start_[b + 1] - start_[b];
  }
  for (int64_t i = 0; left > 0; ++i) {
    const uint16_t b = bucket_[i];
    if (wanted_[b] != 0) {
      ids_[fill_[b]++] = i;
      --left;
    }
  }
  for (int64_t b = lo; b <= hi; ++b) wanted_[b] = 0;
}

void SortedByProbability::SortBucket(int64_t b) {
  if ((state_[b] & kSorted) != 0) return;
  if ((state_[b] & kPlaced) == 0) Place(b, b);
  state_[b] |= kSorted;
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
